package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/config"
)

// cli is one client command invocation: its flags, connection and output.
type cli struct {
	ctx  context.Context
	done func()
	cf   *clientFlags
	conn *grpc.ClientConn
	out  io.Writer
	errw io.Writer
	pos  []string
}

// newCLI parses flags (defined by define on the command's flag set) and connects.
func newCLI(ctx context.Context, name string, args []string, stdout, stderr io.Writer, define func(*flag.FlagSet)) (*cli, error) {
	fs, cf := newClientFlags(name, stderr)
	if define != nil {
		define(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cli{cf: cf, conn: conn, ctx: ctx, done: done, out: stdout, errw: stderr, pos: pos}, nil
}

func (c *cli) close() { c.done() }

// want checks the count of positional arguments.
func (c *cli) want(n int, usage string) error {
	if len(c.pos) != n {
		return usageError("want %s", usage)
	}
	return nil
}

// print writes m as JSON with -o json, else as "field: value" lines.
func (c *cli) print(m proto.Message) error {
	if c.cf.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.out, string(b))
		return err
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}

// table writes rows under a header unless -o json, where each message is printed.
func (c *cli) table(header string, msgs []proto.Message, row func(proto.Message) string) error {
	if c.cf.output == "json" {
		for _, m := range msgs {
			if err := c.print(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, m := range msgs {
		fmt.Fprintln(tw, row(m))
	}
	return tw.Flush()
}

func toMsgs[T proto.Message](xs []T) []proto.Message {
	out := make([]proto.Message, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func lower(prefix, s string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func ago(t interface{ AsTime() time.Time }) string {
	if t == nil {
		return "-"
	}
	return time.Since(t.AsTime()).Round(time.Second).String()
}

// exitError carries a command's exit code out of `deskgrid exec`.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("command exited with %d", e.code) }

func atoi(s string) (int32, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, usageError("%q is not a number", s)
	}
	return int32(n), nil
}

// runExec streams a command's output as it comes and exits with its code.
func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cwd string
	var timeout time.Duration
	var env string
	var asRoot bool
	// Flags come first; everything after the session id (or after --) is the
	// command, its own flags included.
	fs, cf := newClientFlags("exec", stderr)
	fs.BoolVar(&asRoot, "root", false, "run as root of the session's own user namespace (sessions from an image: apt-get install, /etc); not the host's root")
	fs.StringVar(&cwd, "cwd", "", "working directory inside the sandbox")
	fs.DurationVar(&timeout, "t", 0, "kill the command after this long (0: 60s)")
	fs.StringVar(&env, "env", "", "extra environment, K=V,K2=V2")
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < 2 {
		return usageError("exec: want <session> [--] <command> [args...]")
	}
	id, argv := rest[0], rest[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	conn, err := cf.conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	req := &sandboxv1.ExecRequest{SessionId: id, Argv: argv, Cwd: cwd, Env: splitList(env), AsRoot: asRoot}
	if timeout > 0 {
		req.Timeout = durationpb.New(timeout)
	}
	st, err := sandboxv1.NewSandboxServiceClient(conn).Exec(ctx, req)
	if err != nil {
		return rpcError(err)
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("exec: the stream ended without an exit status")
		}
		if err != nil {
			return rpcError(err)
		}
		switch o := m.GetOutput().(type) {
		case *sandboxv1.ExecResponse_Stdout:
			stdout.Write(o.Stdout)
		case *sandboxv1.ExecResponse_Stderr:
			stderr.Write(o.Stderr)
		case *sandboxv1.ExecResponse_Exit:
			if o.Exit.GetTimedOut() {
				fmt.Fprintln(stderr, "deskgrid: command timed out and was killed")
			}
			if code := o.Exit.GetExitCode(); code != 0 {
				return exitError{int(code)}
			}
			return nil
		}
	}
}

// runShell runs a command line in the session's persistent shell.
func runShell(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var restart, asRoot bool
	c, err := newCLI(ctx, "shell", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&restart, "restart", false, "restart the shell, losing its state")
		fs.BoolVar(&asRoot, "root", false, "run in the session's root shell, as root of its own user namespace (sessions from an image); not the host's root")
	})
	if err != nil {
		return err
	}
	defer c.close()
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	if restart {
		if asRoot {
			return usageError("shell: -root does not go with -restart")
		}
		if err := c.want(1, "shell -restart <session>"); err != nil {
			return err
		}
		_, err := sb.RestartShell(c.ctx, &sandboxv1.RestartShellRequest{SessionId: c.pos[0]})
		return rpcError(err)
	}
	if len(c.pos) < 2 {
		return usageError("shell: want <session> <command line>")
	}
	resp, err := sb.RunShell(c.ctx, &sandboxv1.RunShellRequest{SessionId: c.pos[0], Command: strings.Join(c.pos[1:], " "), AsRoot: asRoot})
	if err != nil {
		return rpcError(err)
	}
	if c.cf.output == "json" {
		return c.print(resp)
	}
	stdout.Write(resp.GetOutput())
	if resp.GetTimedOut() {
		fmt.Fprintln(stderr, "deskgrid: timed out; the shell was restarted")
	}
	if resp.GetExitCode() != 0 {
		return exitError{int(resp.GetExitCode())}
	}
	return nil
}

// runAct sends one input action to a session's desktop.
func runAct(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "act", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "act <session> click X Y [right|middle] | move X Y | type TEXT | key CHORD | scroll X Y DY"
	if len(c.pos) < 3 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	nums := func(n int) ([]int32, error) {
		if len(a) < n {
			return nil, usageError("%s", usage)
		}
		out := make([]int32, n)
		for i := range out {
			v, err := atoi(a[i])
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	var act *displayv1.Action
	switch verb {
	case "click":
		p, err := nums(2)
		if err != nil {
			return err
		}
		b := displayv1.MouseButton_MOUSE_BUTTON_LEFT
		if len(a) > 2 {
			v, ok := displayv1.MouseButton_value["MOUSE_BUTTON_"+strings.ToUpper(a[2])]
			if !ok {
				return usageError("unknown button %q", a[2])
			}
			b = displayv1.MouseButton(v)
		}
		act = &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: p[0], Y: p[1]}, Button: b, Clicks: 1}}}
	case "move":
		p, err := nums(2)
		if err != nil {
			return err
		}
		act = &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: p[0], Y: p[1]}}}}
	case "type":
		act = &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: strings.Join(a, " ")}}}
	case "key":
		act = &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: strings.Join(a, " ")}}}
	case "scroll":
		p, err := nums(3)
		if err != nil {
			return err
		}
		act = &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: &displayv1.Point{X: p[0], Y: p[1]}, DeltaY: p[2]}}}
	default:
		return usageError("%s", usage)
	}
	resp, err := displayv1.NewDisplayServiceClient(c.conn).PerformActions(c.ctx, &displayv1.PerformActionsRequest{SessionId: id, Actions: []*displayv1.Action{act}})
	if err != nil {
		return rpcError(err)
	}
	if c.cf.output == "json" {
		return c.print(resp)
	}
	fmt.Fprintf(stdout, "pointer at %d,%d\n", resp.GetCursor().GetX(), resp.GetCursor().GetY())
	return nil
}

// runFiles reads and writes a session's files.
func runFiles(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "files", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "files <session> ls [dir] | cat PATH | put LOCAL REMOTE | get REMOTE LOCAL | rm PATH | mkdir PATH | mv FROM TO"
	if len(c.pos) < 2 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	arg := func(i int) (string, error) {
		if i >= len(a) {
			return "", usageError("%s", usage)
		}
		return a[i], nil
	}
	switch verb {
	case "ls":
		dir := ""
		if len(a) > 0 {
			dir = a[0]
		}
		resp, err := sb.ListFiles(c.ctx, &sandboxv1.ListFilesRequest{SessionId: id, Path: dir})
		if err != nil {
			return rpcError(err)
		}
		return c.table("NAME\tSIZE\tMODE\tMODIFIED", toMsgs(resp.GetFiles()), func(m proto.Message) string {
			f := m.(*sandboxv1.FileInfo)
			name := f.GetName()
			if f.GetIsDir() {
				name += "/"
			}
			return fmt.Sprintf("%s\t%d\t%o\t%s", name, f.GetSize(), f.GetMode(), ago(f.GetModifyTime()))
		})
	case "cat":
		p, err := arg(0)
		if err != nil {
			return err
		}
		st, err := sb.DownloadFile(c.ctx, &sandboxv1.DownloadFileRequest{SessionId: id, Path: p})
		if err != nil {
			return rpcError(err)
		}
		return copyDownload(st, stdout)
	case "get":
		remote, err := arg(0)
		if err != nil {
			return err
		}
		local, err := arg(1)
		if err != nil {
			return err
		}
		st, err := sb.DownloadFile(c.ctx, &sandboxv1.DownloadFileRequest{SessionId: id, Path: remote})
		if err != nil {
			return rpcError(err)
		}
		tmp := local + ".part"
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if err := copyDownload(st, f); err != nil {
			f.Close()
			os.Remove(tmp)
			return err
		}
		if err := f.Close(); err != nil {
			os.Remove(tmp)
			return err
		}
		return os.Rename(tmp, local)
	case "put":
		local, err := arg(0)
		if err != nil {
			return err
		}
		remote, err := arg(1)
		if err != nil {
			return err
		}
		return upload(c, sb, id, local, remote)
	case "rm":
		p, err := arg(0)
		if err != nil {
			return err
		}
		_, err = sb.DeleteFile(c.ctx, &sandboxv1.DeleteFileRequest{SessionId: id, Path: p})
		return rpcError(err)
	case "mkdir":
		p, err := arg(0)
		if err != nil {
			return err
		}
		_, err = sb.MakeDirectory(c.ctx, &sandboxv1.MakeDirectoryRequest{SessionId: id, Path: p})
		return rpcError(err)
	case "mv":
		from, err := arg(0)
		if err != nil {
			return err
		}
		to, err := arg(1)
		if err != nil {
			return err
		}
		_, err = sb.MoveFile(c.ctx, &sandboxv1.MoveFileRequest{SessionId: id, FromPath: from, ToPath: to})
		return rpcError(err)
	}
	return usageError("%s", usage)
}

func copyDownload(st grpc.ServerStreamingClient[sandboxv1.DownloadFileResponse], w io.Writer) error {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return rpcError(err)
		}
		if _, err := w.Write(m.GetChunk()); err != nil {
			return err
		}
	}
}

// upload streams a local file, showing progress for large ones.
func upload(c *cli, sb sandboxv1.SandboxServiceClient, id, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, err := sb.UploadFile(c.ctx)
	if err != nil {
		return rpcError(err)
	}
	if err := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SessionId: id, Path: remote, Mode: uint32(fi.Mode().Perm())}}}); err != nil {
		return rpcError(err)
	}
	buf := make([]byte, 256<<10)
	var sent int64
	r := bufio.NewReader(f)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Chunk{Chunk: buf[:n]}}); serr != nil {
				_, rerr := st.CloseAndRecv()
				return rpcError(errors.Join(serr, rerr))
			}
			sent += int64(n)
			if fi.Size() > 8<<20 {
				fmt.Fprintf(c.errw, "\ruploading %s: %d%%", local, sent*100/fi.Size())
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if fi.Size() > 8<<20 {
		fmt.Fprintln(c.errw)
	}
	_, err = st.CloseAndRecv()
	return rpcError(err)
}

// runChanges reviews and applies what a session changed in its workspace.
func runChanges(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "changes", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "changes <session> [list] | diff PATH | apply [PATH...] | discard [PATH...]"
	if len(c.pos) < 1 {
		return usageError("%s", usage)
	}
	id, verb := c.pos[0], "list"
	var a []string
	if len(c.pos) > 1 {
		verb, a = c.pos[1], c.pos[2:]
	}
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	switch verb {
	case "list":
		resp, err := sb.ListChanges(c.ctx, &sandboxv1.ListChangesRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table("KIND\tPATH\tSIZE", toMsgs(resp.GetChanges()), func(m proto.Message) string {
			ch := m.(*sandboxv1.Change)
			return fmt.Sprintf("%s\t%s\t%d", lower("CHANGE_KIND_", ch.GetKind().String()), ch.GetPath(), ch.GetSize())
		})
	case "diff":
		if len(a) != 1 {
			return usageError("%s", usage)
		}
		resp, err := sb.DiffFile(c.ctx, &sandboxv1.DiffFileRequest{SessionId: id, Path: a[0]})
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			return c.print(resp)
		}
		if resp.GetBinary() {
			fmt.Fprintf(stdout, "binary file %s %s\n", a[0], lower("CHANGE_KIND_", resp.GetChange().GetKind().String()))
			return nil
		}
		fmt.Fprint(stdout, resp.GetDiff())
		return nil
	case "apply":
		resp, err := sb.ApplyChanges(c.ctx, &sandboxv1.ApplyChangesRequest{SessionId: id, Paths: a})
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			return c.print(resp)
		}
		for _, p := range resp.GetApplied() {
			fmt.Fprintln(stdout, "applied", p)
		}
		for _, cf := range resp.GetConflicts() {
			fmt.Fprintln(stdout, "conflict", cf.GetPath(), cf.GetReason())
		}
		if len(resp.GetConflicts()) > 0 {
			return fmt.Errorf("%d conflicts left unapplied", len(resp.GetConflicts()))
		}
		return nil
	case "discard":
		resp, err := sb.DiscardChanges(c.ctx, &sandboxv1.DiscardChangesRequest{SessionId: id, Paths: a})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	}
	return usageError("%s", usage)
}

// runSnapshots saves and restores a session's writable layer.
func runSnapshots(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "snapshots", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "snapshots <session> create | list | restore SNAPSHOT | delete SNAPSHOT"
	if len(c.pos) < 2 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	row := func(m proto.Message) string {
		s := m.(*sandboxv1.Snapshot)
		return fmt.Sprintf("%s\t%s\t%d\t%.12s\t%s", s.GetSnapshotId(), s.GetSessionId(), s.GetSizeBytes(), s.GetSha256(), ago(s.GetCreateTime()))
	}
	const header = "ID\tSESSION\tBYTES\tSHA256\tAGE"
	switch {
	case verb == "create":
		if c.cf.output == "table" {
			fmt.Fprintf(stderr, "saving the writable layer of %s...\n", id)
		}
		resp, err := sb.CreateSnapshot(c.ctx, &sandboxv1.CreateSnapshotRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, []proto.Message{resp.GetSnapshot()}, row)
	case verb == "list":
		resp, err := sb.ListSnapshots(c.ctx, &sandboxv1.ListSnapshotsRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, toMsgs(resp.GetSnapshots()), row)
	case verb == "restore" && len(a) == 1:
		resp, err := sb.RestoreSnapshot(c.ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: id, SnapshotId: a[0]})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	case verb == "delete" && len(a) == 1:
		_, err := sb.DeleteSnapshot(c.ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: id, SnapshotId: a[0]})
		return rpcError(err)
	}
	return usageError("%s", usage)
}

// runRuns starts, watches and steers agent runs.
func runRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("runs: want create, get, list, cancel, events, send, approve or reject")
	}
	sub := args[0]
	var prompt, provider, model, apiKey, baseURL, reason string
	var maxSteps int
	var after int64
	c, err := newCLI(ctx, "runs "+sub, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		switch sub {
		case "create":
			fs.StringVar(&prompt, "prompt", "", "the task")
			fs.StringVar(&provider, "provider", "anthropic", "anthropic, openai or gemini")
			fs.StringVar(&model, "model", "", "model name (default: the provider's)")
			fs.StringVar(&apiKey, "provider-key", "", "provider key for this run (default: the server's -anthropic-api-key, -openai-api-key or -gemini-api-key)")
			fs.StringVar(&baseURL, "base-url", "", "provider base URL")
			fs.IntVar(&maxSteps, "max-steps", 0, "stop after this many model turns (0: 50)")
		case "events":
			fs.Int64Var(&after, "after", 0, "start after this sequence number")
		case "reject":
			fs.StringVar(&reason, "reason", "rejected by the operator", "told to the model")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	ag := agentv1.NewAgentServiceClient(c.conn)
	runRow := func(m proto.Message) string {
		r := m.(*agentv1.Run)
		return fmt.Sprintf("%s\t%s\t%s\t%s/%s\t%d\t%s", r.GetId(), r.GetSessionId(), lower("RUN_STATE_", r.GetState().String()), r.GetProvider(), r.GetModel(), r.GetSteps(), r.GetStateReason())
	}
	const runHeader = "ID\tSESSION\tSTATE\tMODEL\tSTEPS\tREASON"
	one := func(r *agentv1.Run, err error) error {
		if err != nil {
			return rpcError(err)
		}
		return c.table(runHeader, []proto.Message{r}, runRow)
	}
	switch sub {
	case "create":
		if err := c.want(1, "runs create <session> -prompt TEXT"); err != nil {
			return err
		}
		if prompt == "" {
			return usageError("runs create: -prompt is required")
		}
		resp, err := ag.CreateRun(c.ctx, &agentv1.CreateRunRequest{SessionId: c.pos[0], Prompt: prompt, Provider: provider, Model: model, ApiKey: apiKey, BaseUrl: baseURL, MaxSteps: int32(maxSteps)})
		return one(resp.GetRun(), err)
	case "get", "cancel":
		if err := c.want(1, "runs "+sub+" <run>"); err != nil {
			return err
		}
		if sub == "get" {
			resp, err := ag.GetRun(c.ctx, &agentv1.GetRunRequest{RunId: c.pos[0]})
			return one(resp.GetRun(), err)
		}
		resp, err := ag.CancelRun(c.ctx, &agentv1.CancelRunRequest{RunId: c.pos[0]})
		return one(resp.GetRun(), err)
	case "list":
		if err := c.want(1, "runs list <session>"); err != nil {
			return err
		}
		resp, err := ag.ListRuns(c.ctx, &agentv1.ListRunsRequest{SessionId: c.pos[0], PageSize: 100})
		if err != nil {
			return rpcError(err)
		}
		return c.table(runHeader, toMsgs(resp.GetRuns()), runRow)
	case "send":
		if len(c.pos) < 2 {
			return usageError("runs send <run> MESSAGE")
		}
		resp, err := ag.SendMessage(c.ctx, &agentv1.SendMessageRequest{RunId: c.pos[0], Text: strings.Join(c.pos[1:], " ")})
		return one(resp.GetRun(), err)
	case "approve":
		if err := c.want(1, "runs approve <run>"); err != nil {
			return err
		}
		resp, err := ag.ApproveStep(c.ctx, &agentv1.ApproveStepRequest{RunId: c.pos[0]})
		return one(resp.GetRun(), err)
	case "reject":
		if err := c.want(1, "runs reject <run>"); err != nil {
			return err
		}
		resp, err := ag.RejectStep(c.ctx, &agentv1.RejectStepRequest{RunId: c.pos[0], Reason: reason})
		return one(resp.GetRun(), err)
	case "events":
		if err := c.want(1, "runs events <run>"); err != nil {
			return err
		}
		st, err := ag.StreamRunEvents(c.ctx, &agentv1.StreamRunEventsRequest{RunId: c.pos[0], AfterSequence: after})
		if err != nil {
			return rpcError(err)
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return rpcError(err)
			}
			if c.cf.output == "json" {
				if err := c.print(m.GetEvent()); err != nil {
					return err
				}
				continue
			}
			printRunEvent(stdout, m.GetEvent())
		}
	}
	return usageError("runs: unknown subcommand %q", sub)
}

// printRunEvent renders an event as a line of a transcript.
func printRunEvent(w io.Writer, e *agentv1.RunEvent) {
	switch ev := e.GetEvent().(type) {
	case *agentv1.RunEvent_TextDelta:
		fmt.Fprint(w, ev.TextDelta)
	case *agentv1.RunEvent_ThinkingDelta:
	case *agentv1.RunEvent_UserMessage:
		fmt.Fprintf(w, "\n> %s\n", ev.UserMessage)
	case *agentv1.RunEvent_ToolCall:
		tc := ev.ToolCall
		if tc.GetFinished() {
			status := "ok"
			if tc.GetIsError() {
				status = "error: " + tc.GetOutput()
			}
			fmt.Fprintf(w, "\n  [%s done: %s]\n", tc.GetTool(), status)
		} else {
			fmt.Fprintf(w, "\n  [%s %s]", tc.GetTool(), tc.GetInputJson())
		}
	case *agentv1.RunEvent_State:
		fmt.Fprintf(w, "\n-- %s %s\n", lower("RUN_STATE_", ev.State.String()), e.GetReason())
	case *agentv1.RunEvent_Usage:
		fmt.Fprintf(w, "\n  [usage %s]\n", protojson.Format(ev.Usage))
	case *agentv1.RunEvent_Screenshot:
		fmt.Fprint(w, "\n  [screenshot]\n")
	}
}

// runHistory reads, searches, exports and imports what sessions did.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("history: want list, search, export, import or delete")
	}
	sub := args[0]
	var limit int
	c, err := newCLI(ctx, "history "+sub, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&limit, "limit", 100, "entries per page")
	})
	if err != nil {
		return err
	}
	defer c.close()
	hc := historyv1.NewHistoryServiceClient(c.conn)
	entryRow := func(m proto.Message) string {
		e := m.(*historyv1.Entry)
		return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", e.GetSequence(), e.GetTime().AsTime().Format(time.RFC3339), lower("ENTRY_KIND_", e.GetKind().String()), e.GetType(), e.GetRunId())
	}
	const header = "SEQ\tTIME\tKIND\tTYPE\tRUN"
	switch sub {
	case "list":
		if err := c.want(1, "history list <session>"); err != nil {
			return err
		}
		req := &historyv1.ListSessionHistoryRequest{SessionId: c.pos[0], PageSize: int32(limit)}
		var all []*historyv1.Entry
		for {
			resp, err := hc.ListSessionHistory(c.ctx, req)
			if err != nil {
				return rpcError(err)
			}
			all = append(all, resp.GetEntries()...)
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		return c.table(header, toMsgs(all), entryRow)
	case "search":
		if len(c.pos) < 1 {
			return usageError("history search WORDS...")
		}
		resp, err := hc.SearchHistory(c.ctx, &historyv1.SearchHistoryRequest{Query: strings.Join(c.pos, " "), PageSize: int32(limit)})
		if err != nil {
			return rpcError(err)
		}
		return c.table("SESSION\t"+header, toMsgs(resp.GetEntries()), func(m proto.Message) string {
			return m.(*historyv1.Entry).GetSessionId() + "\t" + entryRow(m)
		})
	case "export":
		if err := c.want(1, "history export <session> > file.jsonl"); err != nil {
			return err
		}
		st, err := hc.ExportSessionHistory(c.ctx, &historyv1.ExportSessionHistoryRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		var n int
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				fmt.Fprintf(stderr, "exported %d bytes\n", n)
				return nil
			}
			if err != nil {
				return rpcError(err)
			}
			k, err := stdout.Write(m.GetChunk())
			if err != nil {
				return err
			}
			n += k
		}
	case "import":
		if err := c.want(1, "history import <session> < file.jsonl"); err != nil {
			return err
		}
		st, err := hc.ImportSessionHistory(c.ctx)
		if err != nil {
			return rpcError(err)
		}
		buf := make([]byte, 256<<10)
		first := true
		for {
			n, rerr := os.Stdin.Read(buf)
			if n > 0 || first {
				req := &historyv1.ImportSessionHistoryRequest{Chunk: append([]byte(nil), buf[:n]...)}
				if first {
					req.SessionId, first = c.pos[0], false
				}
				if err := st.Send(req); err != nil {
					_, cerr := st.CloseAndRecv()
					return rpcError(errors.Join(err, cerr))
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		resp, err := st.CloseAndRecv()
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	case "delete":
		if err := c.want(1, "history delete <session>"); err != nil {
			return err
		}
		resp, err := hc.DeleteSessionHistory(c.ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	}
	return usageError("history: unknown subcommand %q", sub)
}

// runSessionVerb handles sessions watch, suspend, resume and keepalive.
func runSessionVerb(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	var mode string
	c, err := newCLI(ctx, "sessions "+sub, args, stdout, stderr, func(fs *flag.FlagSet) {
		if sub == "suspend" {
			fs.StringVar(&mode, "mode", "freeze", "freeze (keeps memory) or hibernate (frees it)")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.want(1, "sessions "+sub+" <id>"); err != nil {
		return err
	}
	sc := sessionv1.NewSessionServiceClient(c.conn)
	id := c.pos[0]
	var s *sessionv1.Session
	switch sub {
	case "watch":
		st, err := sc.WatchSession(c.ctx, &sessionv1.WatchSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return rpcError(err)
			}
			if c.cf.output == "json" {
				if err := c.print(m.GetSession()); err != nil {
					return err
				}
				continue
			}
			ss := m.GetSession()
			fmt.Fprintf(stdout, "%s %s %s\n", time.Now().Format(time.TimeOnly), lower("SESSION_STATE_", ss.GetState().String()), ss.GetStateReason())
		}
	case "suspend":
		v, ok := sessionv1.SuspendMode_value["SUSPEND_MODE_"+strings.ToUpper(mode)]
		if !ok {
			return usageError("-mode %q: want freeze or hibernate", mode)
		}
		resp, err := sc.SuspendSession(c.ctx, &sessionv1.SuspendSessionRequest{SessionId: id, Mode: sessionv1.SuspendMode(v)})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	case "resume":
		resp, err := sc.ResumeSession(c.ctx, &sessionv1.ResumeSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	case "keepalive":
		resp, err := sc.KeepaliveSession(c.ctx, &sessionv1.KeepaliveSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	}
	return printSessions(stdout, c.cf.output, s)
}

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/config"
)

// exitError carries a command's exit code out of `deskgrid exec`.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("command exited with %d", e.code) }

// runExec streams a command's output as it comes and exits with its code.
func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cwd string
	var timeout time.Duration
	var env string
	var asRoot bool
	// Flags come before the session id or right after it; the command starts
	// at the first argument that is not one of them (or after --), its own
	// flags included.
	fs, cf := newClientFlags("exec", stderr)
	fs.BoolVar(&asRoot, "root", false, "run as root of the session's own user namespace (sessions from an image: apt-get install, /etc); not the host's root")
	fs.StringVar(&cwd, "cwd", "", "working directory inside the sandbox")
	fs.DurationVar(&timeout, "t", 0, "kill the command after this long (0: 60s); the call is bounded by -timeout when given, else by this plus 30s")
	fs.StringVar(&env, "env", "", "extra environment, K=V,K2=V2")
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	id, argv, err := execCommand(fs)
	if err != nil {
		return err
	}
	// The call's bound: -timeout when given; else long enough for the node
	// to kill the command at -t and say so.
	bound := cf.timeout
	if !flagGiven(fs, "timeout") {
		bound = cmp.Or(timeout, time.Minute) + 30*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
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

// execCommand splits what fs left after its flags into the session id and
// the command, parsing fs's flags given after the id ("exec <id> -root --
// apt-get update"): the command starts at the first argument that is not a
// flag, or after --.
func execCommand(fs *flag.FlagSet) (string, []string, error) {
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil, usageError("exec: want <session> [--] <command> [args...]")
	}
	id := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return "", nil, err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return "", nil, usageError("exec: want <session> [--] <command> [args...]")
	}
	return id, argv, nil
}

// flagGiven reports whether name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
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

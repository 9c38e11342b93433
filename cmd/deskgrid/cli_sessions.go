package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

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
		return receive(st, func(m *sessionv1.WatchSessionResponse) error {
			if c.cf.output == "json" {
				return c.print(m.GetSession())
			}
			ss := m.GetSession()
			fmt.Fprintf(stdout, "%s %s %s\n", time.Now().Format(time.TimeOnly), lower("SESSION_STATE_", ss.GetState().String()), ss.GetStateReason())
			return nil
		})
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

func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("sessions: want create, list, get or delete")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "create":
		return runSessionCreate(ctx, args, stdout, stderr)
	case "list":
		return runSessionList(ctx, args, stdout, stderr)
	case "get", "delete":
		return runSessionGetDelete(ctx, sub, args, stdout, stderr)
	case "watch", "suspend", "resume", "keepalive":
		return runSessionVerb(ctx, sub, args, stdout, stderr)
	case "commit":
		return runSessionCommit(ctx, args, stdout, stderr)
	default:
		return usageError("sessions: unknown subcommand %q", sub)
	}
}

// runSessionCreate: `deskgrid sessions create`.
func runSessionCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		width, height, depth int
		ttl, idle            time.Duration
		labels, autostart    string
		workspace, image     string
		network              bool
	)
	c, err := newCLI(ctx, "sessions create", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&width, "width", 1280, "screen width in pixels")
		fs.IntVar(&height, "height", 800, "screen height in pixels")
		fs.IntVar(&depth, "depth", 24, "colour depth: 16 or 24")
		fs.DurationVar(&ttl, "ttl", 0, "lifetime (0: server default)")
		fs.DurationVar(&idle, "idle-timeout", 0, "idle time before the session stops (0: server default)")
		fs.StringVar(&labels, "labels", "", "labels, k=v,k2=v2")
		fs.StringVar(&autostart, "autostart", "", "comma-separated programs to start on the desktop")
		fs.StringVar(&workspace, "workspace", "", "workspace folder on the node")
		fs.StringVar(&image, "image", "", "OCI image to run (pulled when the node lacks it)")
		fs.BoolVar(&network, "network", false, "give the session's programs outbound network (user-mode; by default none)")
	})
	if err != nil {
		return err
	}
	defer c.close()
	lm, err := parseLabels(labels)
	if err != nil {
		return err
	}
	req := &sessionv1.CreateSessionRequest{
		Display:   &sessionv1.DisplaySpec{Width: proto.Int32(int32(width)), Height: proto.Int32(int32(height)), Depth: proto.Int32(int32(depth))},
		Labels:    lm,
		Autostart: splitList(autostart),
		Workspace: workspace,
		Image:     image,
		Network:   network,
	}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	if idle > 0 {
		req.IdleTimeout = durationpb.New(idle)
	}
	if c.cf.output == "table" {
		fmt.Fprintf(stderr, "creating a %dx%d session...\n", width, height)
	}
	resp, err := sessionv1.NewSessionServiceClient(c.conn).CreateSession(c.ctx, req)
	if err != nil {
		return rpcError(err)
	}
	return printSessions(stdout, c.cf.output, resp.GetSession())
}

// runSessionList: `deskgrid sessions list`, every page.
func runSessionList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		pageSize       int
		states, labels string
	)
	c, err := newCLI(ctx, "sessions list", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&pageSize, "limit", 100, "sessions per page")
		fs.StringVar(&states, "state", "", "only these states, comma-separated (running,stopped,...)")
		fs.StringVar(&labels, "labels", "", "only sessions with these labels, k=v,k2=v2")
	})
	if err != nil {
		return err
	}
	defer c.close()
	lm, err := parseLabels(labels)
	if err != nil {
		return err
	}
	req := &sessionv1.ListSessionsRequest{PageSize: int32(pageSize), Labels: lm}
	for _, s := range splitList(states) {
		v, ok := sessionv1.SessionState_value["SESSION_STATE_"+strings.ToUpper(s)]
		if !ok {
			return usageError("unknown state %q", s)
		}
		req.States = append(req.States, sessionv1.SessionState(v))
	}
	client := sessionv1.NewSessionServiceClient(c.conn)
	var all []*sessionv1.Session
	for {
		resp, err := client.ListSessions(c.ctx, req)
		if err != nil {
			return rpcError(err)
		}
		all = append(all, resp.GetSessions()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	return printSessions(stdout, c.cf.output, all...)
}

// runSessionGetDelete: `deskgrid sessions get <id>` and `sessions delete <id>`.
func runSessionGetDelete(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "sessions "+sub, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	if len(c.pos) != 1 {
		return usageError("sessions %s: want one session id", sub)
	}
	client := sessionv1.NewSessionServiceClient(c.conn)
	var s *sessionv1.Session
	if sub == "get" {
		resp, err := client.GetSession(c.ctx, &sessionv1.GetSessionRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	} else {
		resp, err := client.DeleteSession(c.ctx, &sessionv1.DeleteSessionRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	}
	return printSessions(stdout, c.cf.output, s)
}

// runSessionCommit: `deskgrid sessions commit <id> <image>`.
func runSessionCommit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseCLI("sessions commit", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	if len(c.pos) != 2 {
		return usageError("sessions commit: want a session id and an image name (my-team/qa-desktop:v3)")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	resp, err := sessionv1.NewSessionServiceClient(c.conn).CommitSession(c.ctx, &sessionv1.CommitSessionRequest{SessionId: c.pos[0], Image: c.pos[1]})
	if err != nil {
		return rpcError(err)
	}
	if c.cf.output == "json" {
		b, _ := protojson.Marshal(resp)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tSIZE")
	fmt.Fprintf(tw, "%s\t%s\t%s\n", resp.GetImage(), resp.GetDigest(), humanBytes(resp.GetSize()))
	return tw.Flush()
}

func printSessions(w io.Writer, output string, ss ...*sessionv1.Session) error {
	if output == "json" {
		m := protojson.MarshalOptions{Multiline: true, Indent: "  "}
		for _, s := range ss {
			b, err := m.Marshal(s)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tSIZE\tNODE\tDISPLAY\tAGE\tREASON")
	for _, s := range ss {
		age := "-"
		if s.GetCreateTime() != nil {
			age = ago(s.GetCreateTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\t%s\t%s\n", s.GetId(),
			strings.ToLower(strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_")),
			s.GetDisplay().GetWidth(), s.GetDisplay().GetHeight(), dash(s.GetNodeId()), dash(s.GetXDisplay()), age, dash(s.GetStateReason()))
	}
	return tw.Flush()
}

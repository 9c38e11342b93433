package main

import (
	"context"
	"flag"
	"fmt"
	"google.golang.org/protobuf/proto"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/config"
)

// clientFlags are what every client command shares.
type clientFlags struct {
	addr    string
	apiKey  string
	output  string
	timeout time.Duration
}

func newClientFlags(name string, stderr io.Writer) (*flag.FlagSet, *clientFlags) {
	c := &clientFlags{output: "table"}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9090", "deskgrid gRPC address")
	fs.StringVar(&c.apiKey, "api-key", "", "API key (default: the admin key deskgrid up keeps in its data dir, if readable)")
	if name != "screenshot" {
		fs.StringVar(&c.output, "o", "table", "output: table or json")
	}
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "bound on the call")
	return fs, c
}

func (c *clientFlags) conn() (*grpc.ClientConn, error) {
	if c.output != "table" && c.output != "json" {
		return nil, usageError("-o %q: want table or json", c.output)
	}
	if key := clientKey(c.apiKey); key != "" {
		return dial(c.addr, grpc.WithPerRPCCredentials(auth.KeyCredentials(key)))
	}
	return dial(c.addr)
}

// connect dials the deployment for one command, whose calls then share
// the command's -timeout; done closes the connection and ends the timeout.
func (c *clientFlags) connect(ctx context.Context) (*grpc.ClientConn, context.Context, func(), error) {
	conn, err := c.conn()
	if err != nil {
		return nil, ctx, func() {}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return conn, ctx, func() { cancel(); conn.Close() }, nil
}

// parseInterleaved parses flags that may come before or after positional
// arguments ("sessions get <id> -o json").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := config.Parse(fs, args, nil); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("sessions: want create, list, get or delete")
	}
	sub, args := args[0], args[1:]
	fs, cf := newClientFlags("sessions "+sub, stderr)
	var (
		width, height, depth int
		ttl, idle            time.Duration
		labels, autostart    string
		workspace, image     string
		pageSize             int
		states               string
	)
	switch sub {
	case "create":
		fs.IntVar(&width, "width", 1280, "screen width in pixels")
		fs.IntVar(&height, "height", 800, "screen height in pixels")
		fs.IntVar(&depth, "depth", 24, "colour depth: 16 or 24")
		fs.DurationVar(&ttl, "ttl", 0, "lifetime (0: server default)")
		fs.DurationVar(&idle, "idle-timeout", 0, "idle time before the session stops (0: server default)")
		fs.StringVar(&labels, "labels", "", "labels, k=v,k2=v2")
		fs.StringVar(&autostart, "autostart", "", "comma-separated programs to start on the desktop")
		fs.StringVar(&workspace, "workspace", "", "workspace folder on the node")
		fs.StringVar(&image, "image", "", "OCI image to run (pulled when the node lacks it)")
	case "list":
		fs.IntVar(&pageSize, "limit", 100, "sessions per page")
		fs.StringVar(&states, "state", "", "only these states, comma-separated (running,stopped,...)")
		fs.StringVar(&labels, "labels", "", "only sessions with these labels, k=v,k2=v2")
	case "get", "delete":
	case "watch", "suspend", "resume", "keepalive":
		return runSessionVerb(ctx, sub, args, stdout, stderr)
	case "commit":
		return runSessionCommit(ctx, args, stdout, stderr)
	default:
		return usageError("sessions: unknown subcommand %q", sub)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	client := sessionv1.NewSessionServiceClient(conn)

	switch sub {
	case "create":
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
		}
		if ttl > 0 {
			req.Ttl = durationpb.New(ttl)
		}
		if idle > 0 {
			req.IdleTimeout = durationpb.New(idle)
		}
		if cf.output == "table" {
			fmt.Fprintf(stderr, "creating a %dx%d session...\n", width, height)
		}
		resp, err := client.CreateSession(ctx, req)
		if err != nil {
			return rpcError(err)
		}
		return printSessions(stdout, cf.output, resp.GetSession())
	case "list":
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
		var all []*sessionv1.Session
		for {
			resp, err := client.ListSessions(ctx, req)
			if err != nil {
				return rpcError(err)
			}
			all = append(all, resp.GetSessions()...)
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		return printSessions(stdout, cf.output, all...)
	case "get", "delete":
		if len(pos) != 1 {
			return usageError("sessions %s: want one session id", sub)
		}
		var s *sessionv1.Session
		if sub == "get" {
			resp, err := client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: pos[0]})
			if err != nil {
				return rpcError(err)
			}
			s = resp.GetSession()
		} else {
			resp, err := client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: pos[0]})
			if err != nil {
				return rpcError(err)
			}
			s = resp.GetSession()
		}
		return printSessions(stdout, cf.output, s)
	}
	return nil
}

func runScreenshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := newClientFlags("screenshot", stderr)
	out := fs.String("o", "screenshot.png", "file to write, - for standard output")
	format := fs.String("format", "png", "png or jpeg")
	quality := fs.Int("quality", 0, "JPEG quality 1-100 (0: 80)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("screenshot: want one session id")
	}
	req := &displayv1.ScreenshotRequest{SessionId: pos[0], Quality: int32(*quality)}
	switch strings.ToLower(*format) {
	case "png":
		req.Format = displayv1.ImageFormat_IMAGE_FORMAT_PNG
	case "jpeg", "jpg":
		req.Format = displayv1.ImageFormat_IMAGE_FORMAT_JPEG
	default:
		return usageError("-format %q: want png or jpeg", *format)
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := displayv1.NewDisplayServiceClient(conn).Screenshot(ctx, req)
	if err != nil {
		return rpcError(err)
	}
	if *out == "-" {
		_, err = stdout.Write(resp.GetData())
		return err
	}
	// Written beside the target and renamed, so a reader never sees half a file.
	tmp := *out + ".part"
	if err := os.WriteFile(tmp, resp.GetData(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%dx%d, %d bytes)\n", *out, resp.GetWidth(), resp.GetHeight(), len(resp.GetData()))
	return nil
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
			age = time.Since(s.GetCreateTime().AsTime()).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%s\t%s\t%s\t%s\n", s.GetId(),
			strings.ToLower(strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_")),
			s.GetDisplay().GetWidth(), s.GetDisplay().GetHeight(), dash(s.GetNodeId()), dash(s.GetXDisplay()), age, dash(s.GetStateReason()))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("label %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// rpcError turns a gRPC status into a short message a person can act on.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s", strings.ToLower(st.Code().String()), st.Message())
	}
	return err
}

// runSessionCommit: `deskgrid sessions commit <id> <image>`.
func runSessionCommit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := newClientFlags("sessions commit", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError("sessions commit: want a session id and an image name (my-team/qa-desktop:v3)")
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := sessionv1.NewSessionServiceClient(conn).CommitSession(ctx, &sessionv1.CommitSessionRequest{SessionId: pos[0], Image: pos[1]})
	if err != nil {
		return rpcError(err)
	}
	if cf.output == "json" {
		b, _ := protojson.Marshal(resp)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "%s\t%s\t%d\n", resp.GetImage(), resp.GetDigest(), resp.GetSize())
	return nil
}

// dialAddr is the address a client on this machine dials to reach a
// listener: a wildcard host (":9090", "0.0.0.0", "::") becomes loopback.
func dialAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		// Go's wildcard listeners are dual-stack: IPv4 loopback reaches them.
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9090", "deskgrid gRPC address (or "+config.EnvName("addr")+"; every flag has its DESKGRID_ variable)")
	fs.StringVar(&c.apiKey, "api-key", "", "API key (default: the admin key deskgrid up keeps in its data dir, if readable)")
	if name != "screenshot" {
		fs.StringVar(&c.output, "o", "table", "output: table or json")
	}
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "bound on the call")
	fs.Usage = func() {
		if lines := synopsis(name); lines != "" {
			fmt.Fprintf(stderr, "Usage:\n%s\nFlags:\n", lines)
		} else {
			fmt.Fprintf(stderr, "Usage of %s:\n", name)
		}
		fs.PrintDefaults()
	}
	return fs, c
}

// synopsis is what `deskgrid help` says of command name ("act", "sessions
// create"): its own lines, else those of its command group.
func synopsis(name string) string {
	find := func(prefix string) string {
		var out []string
		for _, l := range strings.Split(usage, "\n") {
			t := strings.TrimSpace(l)
			if t == prefix || strings.HasPrefix(t, prefix+" ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if lines := find("deskgrid " + name); lines != "" {
		return lines
	}
	return find("deskgrid " + strings.Fields(name)[0])
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
	c, err := parseCLI(name, args, stdout, stderr, define)
	if err != nil {
		return nil, err
	}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// parseCLI parses flags like newCLI but does not connect, for a command
// that checks its arguments first; it then calls connect.
func parseCLI(name string, args []string, stdout, stderr io.Writer, define func(*flag.FlagSet)) (*cli, error) {
	fs, cf := newClientFlags(name, stderr)
	if define != nil {
		define(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	return &cli{cf: cf, done: func() {}, out: stdout, errw: stderr, pos: pos}, nil
}

// connect dials the deployment; the command's calls then share its -timeout
// (c.ctx) until close.
func (c *cli) connect(ctx context.Context) error {
	conn, err := c.cf.conn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cf.timeout)
	c.conn, c.ctx, c.done = conn, ctx, func() { cancel(); conn.Close() }
	return nil
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

// ago says how long ago t was, for a table's AGE or MODIFIED column.
func ago(t interface{ AsTime() time.Time }) string {
	if t == nil {
		return "-"
	}
	return agoAt(time.Now(), t.AsTime())
}

// agoAt is ago seen at now: a duration up to two days back (26h3m0s), a
// date before that (2024-05-06, UTC), as a file from a package or an
// image's epoch-dated one (1970-01-01) is.
func agoAt(now, t time.Time) string {
	if d := now.Sub(t); d < 48*time.Hour {
		return d.Round(time.Second).String()
	}
	return t.UTC().Format(time.DateOnly)
}

func atoi(s string) (int32, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, usageError("%q is not a number", s)
	}
	return int32(n), nil
}

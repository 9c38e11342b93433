// Command deskgrid runs deskgrid's services and talks to them.
//
//	deskgrid up                       everything on one machine
//	deskgrid serve <role>             one role: session, node, display, sandbox, agent, history, gateway
//	deskgrid sessions create|list|get|delete
//	deskgrid screenshot <session> -o shot.png
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `deskgrid gives AI computer-use agents isolated Linux desktops on demand.

Usage:
  deskgrid up [flags]                      run every service on this machine (embedded NATS, SQLite, one node)
  deskgrid serve <role> [flags]            run one role: session, node, display, sandbox, agent, history, gateway
  deskgrid sessions create [flags]         create a session and wait until its desktop answers
  deskgrid sessions list [flags]           list sessions
  deskgrid sessions get <id>               show one session
  deskgrid sessions delete <id>            stop a session and free what it used
  deskgrid screenshot <id> -o shot.png     save a screenshot of a session's desktop
  deskgrid mcp                             serve deskgrid's tools to an MCP host over stdio
  deskgrid version

Every flag can also be set with DESKGRID_<FLAG> (for example DESKGRID_HTTP_ADDR=:8080).
Run "deskgrid <command> -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "deskgrid:", err)
		}
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError("no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "up":
		return runUp(ctx, rest, stdout, stderr)
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "sessions", "session":
		return runSessions(ctx, rest, stdout, stderr)
	case "screenshot":
		return runScreenshot(ctx, rest, stdout, stderr)
	case "mcp":
		return runMCP(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "deskgrid", version)
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError("unknown command %q", cmd)
	}
}

type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

func usageError(format string, a ...any) error { return usageErr{fmt.Sprintf(format, a...)} }

func exitCode(err error) int {
	var u usageErr
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

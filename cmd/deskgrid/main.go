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
  deskgrid sessions watch|suspend|resume|keepalive <id>
  deskgrid sessions commit <id> IMAGE      save a session's changes as a new image (my-team/qa-desktop:v3)
  deskgrid images list | pull [-all-nodes] REF | import [-all-nodes] [-tag REF] FILE|LAYOUT-DIR | rm REF | inspect REF [-node ID]   the nodes' OCI images (cluster: -node names one node; list/inspect without it ask every live node; -all-nodes: pull onto every node at once, or import onto each in turn)
  deskgrid exec <id> [--] <command> [args]  run a command in a session's sandbox, streaming its output
  deskgrid shell <id> <command line>        run a line in the session's persistent shell
  deskgrid act <id> click X Y | move X Y | type TEXT | key CHORD | scroll X Y DY
  deskgrid a11y <id> [tree] [-visible] [-app A] [-root NODE|-window W|-focused|-pid P] [-format text|json|osworld] [-role R -name N]   the accessibility tree of a session's desktop
  deskgrid a11y <id> do NODE ACTION | set-text NODE TEXT | focus NODE   act on a node (or the one -role/-name find)
  deskgrid apps <id> [launch APP [FILE|URL...]]   the applications a session offers; start one, print its window
  deskgrid apps <id> open FILE|URL   open a file or an http(s)/file URL with the session's default application, print its window
  deskgrid clipboard <id> [get] [-png FILE] | set TEXT | set -png FILE [-primary]   a session's clipboard: text or a PNG image
  deskgrid files <id> ls|cat|put|get|rm|mkdir|mv ...
  deskgrid changes <id> [list] | diff PATH | apply [PATH...] | discard [PATH...]
  deskgrid snapshots <id> create | list | restore SNAPSHOT | delete SNAPSHOT
  deskgrid runs create <id> -prompt TEXT [-a11y] | get|cancel|events|approve|reject <run> | list <id> | send <run> TEXT
  deskgrid history list <id> | search WORDS | export <id> | import <id> | delete <id>
  deskgrid recordings start <id> [-fps N] [-format mp4|webm] | stop <id> <rec> | list <id> | get <id> <rec> | download <id> <rec> [-out FILE]
  deskgrid nodes list | get|drain|undrain <id>   the nodes of a cluster
  deskgrid images build <recipe> -o <dir>  build a session image from a recipe (deploy/images/desktop) into an OCI layout
  deskgrid gc [-dry-run]                   list and remove what a stopped deskgrid's sessions left behind
  deskgrid tenants create <id> | list | delete <id>     tenants (on the deskgrid machine)
  deskgrid keys create -tenant T -scopes read,write | list | revoke <key-id>
  deskgrid mcp                             serve deskgrid's tools to an MCP host over stdio
  deskgrid completion bash|zsh             shell completion script
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
	if len(args) >= 2 && args[0] == "images" && args[1] == "build" {
		return runImagesBuild(ctx, args[2:], stdout, stderr)
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
	case "images", "image":
		return runImages(ctx, rest, stdout, stderr)
	case "mcp":
		return runMCP(ctx, rest, stdout, stderr)
	case "exec":
		return runExec(ctx, rest, stdout, stderr)
	case "shell":
		return runShell(ctx, rest, stdout, stderr)
	case "act":
		return runAct(ctx, rest, stdout, stderr)
	case "a11y", "accessibility":
		return runAccessibility(ctx, rest, stdout, stderr)
	case "apps":
		return runApps(ctx, rest, stdout, stderr)
	case "clipboard":
		return runClipboard(ctx, rest, stdout, stderr)
	case "files":
		return runFiles(ctx, rest, stdout, stderr)
	case "changes":
		return runChanges(ctx, rest, stdout, stderr)
	case "snapshots":
		return runSnapshots(ctx, rest, stdout, stderr)
	case "runs", "run":
		return runRuns(ctx, rest, stdout, stderr)
	case "history":
		return runHistory(ctx, rest, stdout, stderr)
	case "recordings", "recording":
		return runRecordings(ctx, rest, stdout, stderr)
	case "nodes":
		return runNodes(ctx, rest, stdout, stderr)
	case "gc":
		return runGC(ctx, rest, stdout, stderr)
	case "tenants":
		return runTenants(ctx, rest, stdout, stderr)
	case "keys":
		return runKeys(ctx, rest, stdout, stderr)
	case "completion":
		return runCompletion(rest, stdout)
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
	var x exitError
	if errors.As(err, &x) {
		return x.code
	}
	var u usageErr
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

package main

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/deskgrid/deskgrid/services/platform/config"
)

// exec's flags work before the session id and right after it; the command
// starts at the first argument that is not one of them, or after --, and
// keeps its own flags.
func TestExecCommand(t *testing.T) {
	for _, c := range []struct {
		args     []string
		root     bool
		cwd      string
		wantArgv []string
	}{
		{[]string{"-root", "s-1", "--", "apt-get", "update"}, true, "", []string{"apt-get", "update"}},
		{[]string{"s-1", "-root", "--", "apt-get", "update"}, true, "", []string{"apt-get", "update"}},
		{[]string{"s-1", "-cwd", "/tmp", "-root", "id", "-u"}, true, "/tmp", []string{"id", "-u"}},
		{[]string{"s-1", "ls", "-la", "-root"}, false, "", []string{"ls", "-la", "-root"}},
		{[]string{"s-1", "--", "-root"}, false, "", []string{"-root"}},
	} {
		fs := flag.NewFlagSet("exec", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		root := fs.Bool("root", false, "")
		cwd := fs.String("cwd", "", "")
		if err := config.Parse(fs, c.args, func(string) (string, bool) { return "", false }); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		id, argv, err := execCommand(fs)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if id != "s-1" || !slices.Equal(argv, c.wantArgv) || *root != c.root || *cwd != c.cwd {
			t.Errorf("%q: session %q argv %q root %v cwd %q; want s-1 %q %v %q", c.args, id, argv, *root, *cwd, c.wantArgv, c.root, c.cwd)
		}
	}
	for _, args := range [][]string{{}, {"s-1"}, {"s-1", "-root"}, {"s-1", "--"}} {
		fs := flag.NewFlagSet("exec", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool("root", false, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, argv, err := execCommand(fs); err == nil {
			t.Errorf("%q: command %q, want a usage error", args, argv)
		}
	}
}

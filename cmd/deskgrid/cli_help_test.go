package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// A client command's -h shows what the command takes, as `deskgrid help`
// says it, before its flags.
func TestClientCommandHelpShowsSynopsis(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"act", "-h"}, "deskgrid act <id> click X Y"},
		{[]string{"changes", "-h"}, "deskgrid changes <id> [list] | diff PATH"},
		{[]string{"sessions", "create", "-h"}, "deskgrid sessions create [flags]"},
		{[]string{"exec", "-h"}, "deskgrid exec <id> [--] <command> [args]"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("deskgrid %v: err %v, want flag.ErrHelp", tc.args, err)
		}
		got := errb.String()
		if !strings.Contains(got, tc.want) || !strings.Contains(got, "-addr") {
			t.Errorf("deskgrid %v printed\n%s\nwant %q and the flags", tc.args, got, tc.want)
		}
		if strings.Contains(got, "deskgrid up [flags]") {
			t.Errorf("deskgrid %v printed every command's synopsis:\n%s", tc.args, got)
		}
	}
}

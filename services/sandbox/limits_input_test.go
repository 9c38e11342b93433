package sandbox

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// Oversized command lines are bad input with a message naming the limit,
// refused before anything starts.
func TestArgvLimits(t *testing.T) {
	many := make([]string, maxArgs+1)
	for i := range many {
		many[i] = "a"
	}
	for _, tc := range []struct {
		name string
		argv []string
		want string // "" accepts
	}{
		{"ordinary", []string{"ls", "-la"}, ""},
		{"empty", nil, "argv is required"},
		{"NUL", []string{"echo", "a\x00b"}, "NUL"},
		{"as many arguments as allowed", many[:maxArgs], ""},
		{"too many arguments", many, "at most 4096"},
		{"one argument at the limit", []string{"echo", strings.Repeat("x", maxArgBytes)}, ""},
		{"one argument too long", []string{"echo", strings.Repeat("x", maxArgBytes+1)}, "argv[1] is 131073 bytes"},
		{"too much in all", []string{"echo", strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), strings.Repeat("x", maxArgBytes), "y"}, "in all"},
	} {
		err := validateArgv(tc.argv)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if code, _ := codeOf(err); code != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (code %v), want InvalidArgument with %q", tc.name, err, code, tc.want)
		}
	}
	for _, tc := range []struct {
		cwd  string
		want string
	}{
		{"/home/user/" + strings.Repeat("d", 300), "at most 255"},
		{strings.Repeat("d/", 3000), "at most 4095"},
	} {
		if _, err := execCwd(tc.cwd); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cwd of %d bytes: %v", len(tc.cwd), err)
		} else if code, _ := codeOf(err); code != codes.InvalidArgument {
			t.Errorf("cwd of %d bytes: code %v", len(tc.cwd), code)
		}
	}
}

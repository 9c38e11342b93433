package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// A file call's path error names the path the session's programs see, not
// one relative to the sandbox's root directory on the node: beneath / for a
// session on an image, beneath the home for one on the node's programs.
func TestShownPathErrors(t *testing.T) {
	notExist := func(p string) error {
		return fmt.Errorf("read: %w", &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist})
	}
	for _, c := range []struct {
		name string
		b    *box
		err  error
		want string
	}{
		{"image", &box{img: &boxImage{}}, notExist("home/user/nope.txt"), "/home/user/nope.txt"},
		{"image, the root", &box{img: &boxImage{}}, notExist("."), "/"},
		{"node's programs", &box{}, notExist("docs/nope.txt"), "/home/user/docs/nope.txt"},
		{"already absolute", &box{img: &boxImage{}}, notExist("/etc/x"), "/etc/x"},
	} {
		var pe *fs.PathError
		if !errors.As(c.b.shown(c.err), &pe) || pe.Path != c.want {
			t.Errorf("%s: %v, want the path %s", c.name, c.err, c.want)
		}
	}
	if err := (&box{}).shown(nil); err != nil {
		t.Errorf("shown(nil) = %v", err)
	}
	other := errors.New("not a path error")
	if err := (&box{}).shown(other); err != other {
		t.Errorf("shown(%v) = %v, want it as it is", other, err)
	}
}

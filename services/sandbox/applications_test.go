package sandbox

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestExecArgv(t *testing.T) {
	for _, c := range []struct {
		exec string
		args []string
		want []string
		err  string
	}{
		{exec: "/usr/bin/chromium %U", want: []string{"/usr/bin/chromium"}},
		{exec: "/usr/bin/chromium %U", args: []string{"https://a.example", "b.html"}, want: []string{"/usr/bin/chromium", "https://a.example", "b.html"}},
		{exec: "mousepad %F", args: []string{"/tmp/a b.txt"}, want: []string{"mousepad", "/tmp/a b.txt"}},
		{exec: "atril %U --class=x", args: []string{"a.pdf"}, want: []string{"atril", "a.pdf", "--class=x"}},
		{exec: "thunar %f", args: []string{"/home", "/tmp"}, want: []string{"thunar", "/home"}},
		{exec: `sh -c "echo \"hi there\"; exec lxterminal" %i %c`, want: []string{"sh", "-c", `echo "hi there"; exec lxterminal`}},
		{exec: "printf 100%% %k", want: []string{"printf", "100%"}},
		{exec: "lxterminal", args: []string{"x"}, err: "takes no files"},
		{exec: `sh -c "unterminated`, err: "unbalanced"},
		{exec: "%U", err: "empty"},
	} {
		got, err := execArgv(c.exec, c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %q: %v, want an error about %q", c.exec, c.args, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q %q = %q, %v; want %q", c.exec, c.args, got, err, c.want)
		}
	}
}

func TestParseDesktopEntry(t *testing.T) {
	fsys := fstest.MapFS{
		"shown.desktop":  {Data: []byte("[Desktop Entry]\nType=Application\nName=Mousepad\nName[de]=Mauspad\nComment=Edit text\nExec=mousepad %F\nCategories=Utility;TextEditor;\n[Desktop Action new]\nName=New Window\nExec=mousepad --new\n")},
		"hidden.desktop": {Data: []byte("[Desktop Entry]\nType=Application\nName=Helper\nExec=helper\nNoDisplay=true\n")},
		"link.desktop":   {Data: []byte("[Desktop Entry]\nType=Link\nName=Site\nURL=https://example.org\n")},
		"long.desktop":   {Data: []byte("[Desktop Entry]\nType=Application\nName=Long\nExec=x\nComment=" + strings.Repeat("a", maxEntryBytes) + "\n")},
	}
	open := func(name string) *sandboxAppResult {
		f, err := fsys.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		a, ok := parseDesktopEntry(f)
		return &sandboxAppResult{name: a.GetName(), exec: a.GetExec(), cats: a.GetCategories(), ok: ok}
	}
	if r := open("shown.desktop"); !r.ok || r.name != "Mousepad" || r.exec != "mousepad %F" || !slices.Equal(r.cats, []string{"Utility", "TextEditor"}) {
		t.Errorf("shown: %+v", r)
	}
	for _, n := range []string{"hidden.desktop", "link.desktop", "long.desktop"} {
		if r := open(n); r.ok {
			t.Errorf("%s is offered: %+v", n, r)
		}
	}
}

type sandboxAppResult struct {
	name, exec string
	cats       []string
	ok         bool
}

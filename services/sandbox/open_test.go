package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestParseOpenTarget(t *testing.T) {
	for _, c := range []struct {
		in         string
		path, url  string
		invalidHas string
	}{
		{in: "notes.txt", path: "notes.txt"},
		{in: "/home/user/a b.txt", path: "/home/user/a b.txt"},
		{in: "./odd:name.txt", path: "./odd:name.txt"},
		{in: "https://example.org/a?b=c#d", url: "https://example.org/a?b=c#d"},
		{in: "HTTP://127.0.0.1:8080/", url: "HTTP://127.0.0.1:8080/"},
		{in: "file:///home/user/page%20one.html", path: "/home/user/page one.html"},
		{in: "file://localhost/tmp/a.txt", path: "/tmp/a.txt"},
		{in: "", invalidHas: "target is required"},
		{in: "   ", invalidHas: "target is required"},
		{in: "mailto:someone@example.org", invalidHas: `scheme "mailto"`},
		{in: "javascript:alert(1)", invalidHas: `scheme "javascript"`},
		{in: "data:text/html,<b>x</b>", invalidHas: `scheme "data"`},
		{in: "ftp://example.org/a", invalidHas: `scheme "ftp"`},
		{in: "odd:name.txt", invalidHas: "./name"},
		{in: "file://other-host/etc/passwd", invalidHas: "only the session's own files"},
		{in: "file:relative", invalidHas: "no absolute path"},
		{in: "http:///nohost", invalidHas: "names no host"},
		{in: "a\x00b", invalidHas: "NUL"},
		{in: "a\nb", invalidHas: "line break"},
		{in: strings.Repeat("a", maxOpenTarget+1), invalidHas: "at most"},
	} {
		got, err := parseOpenTarget(c.in)
		if c.invalidHas != "" {
			if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), c.invalidHas) {
				t.Errorf("%.40q: %v, want InvalidArgument about %q", c.in, err, c.invalidHas)
			}
			continue
		}
		if err != nil || got.path != c.path || got.url != c.url {
			t.Errorf("%q = %+v, %v; want path %q url %q", c.in, got, err, c.path, c.url)
		}
	}
}

func TestParseDefaultFor(t *testing.T) {
	for _, c := range []struct{ out, ct, id string }{
		{"text/plain\nDefault application for “text/plain”: org.xfce.mousepad.desktop\nRegistered applications:\n\torg.xfce.mousepad.desktop\n", "text/plain", "org.xfce.mousepad"},
		{"x-scheme-handler/https\nDefault application for \"x-scheme-handler/https\": chromium.desktop\n", "x-scheme-handler/https", "chromium"},
		{"application/x-zerosize\nNo default applications for “application/x-zerosize”\nNo registered applications\nNo recommended applications\n", "application/x-zerosize", ""},
		{"application/octet-stream\n", "application/octet-stream", ""},
	} {
		ct, id := parseDefaultFor(c.out)
		if ct != c.ct || id != c.id {
			t.Errorf("%q = %q, %q; want %q, %q", c.out, ct, id, c.ct, c.id)
		}
	}
}

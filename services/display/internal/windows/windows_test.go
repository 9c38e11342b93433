package windows

import "testing"

func TestPropertyText(t *testing.T) {
	for _, tc := range []struct {
		in              string
		instance, class string
	}{
		{"xterm\x00XTerm\x00", "xterm", "XTerm"},
		{"chromium\x00Chromium", "chromium", "Chromium"},
		{"solo\x00", "solo", ""},
		{"", "", ""},
		{"caf\xe9\x00Caf\xe9\x00", "café", "Café"},
	} {
		i, c := splitClass([]byte(tc.in))
		if i != tc.instance || c != tc.class {
			t.Errorf("WM_CLASS %q: %q %q, want %q %q", tc.in, i, c, tc.instance, tc.class)
		}
	}
	if got := latin1([]byte("R\xe9sum\xe9")); got != "Résumé" {
		t.Errorf("latin1: %q", got)
	}
	if got := validUTF8([]byte("ok \xff")); got != "ok \uFFFD" {
		t.Errorf("validUTF8: %q", got)
	}
}

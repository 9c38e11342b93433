package atspi

import "testing"

// Only an application's unique name and a real object path make a node
// id: the bus daemon's and the registry's well-known names are refused.
func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		id, bus, path string
	}{
		{":1.5:/org/a11y/atspi/accessible/12", ":1.5", "/org/a11y/atspi/accessible/12"},
		{":1.123:/org/a11y/atspi/accessible/root", ":1.123", "/org/a11y/atspi/accessible/root"},
		{":1.5:/", ":1.5", "/"},
		{"org.freedesktop.DBus:/org/freedesktop/DBus", "", ""},
		{"org.a11y.atspi.Registry:/org/a11y/atspi/accessible/root", "", ""},
		{":1.5:/org/a11y/atspi/null", "", ""},
		{":1.5:/org//a11y", "", ""},
		{":1.5:/org/a11y/", "", ""},
		{":1..5:/org/a11y", "", ""},
		{":1.5", "", ""},
		{":/org/a11y", "", ""},
		{"", "", ""},
		{":1.5 :/org/a11y", "", ""},
	} {
		bus, path, err := ParseID(tc.id)
		if tc.bus == "" {
			if err == nil {
				t.Errorf("ParseID(%q) = %q %q, want an error", tc.id, bus, path)
			}
			continue
		}
		if err != nil || bus != tc.bus || string(path) != tc.path {
			t.Errorf("ParseID(%q) = %q %q %v, want %q %q", tc.id, bus, path, err, tc.bus, tc.path)
		}
	}
}

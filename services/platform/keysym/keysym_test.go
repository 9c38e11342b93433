package keysym

import (
	"fmt"
	"testing"
)

func TestParseChord(t *testing.T) {
	tests := []struct {
		chord string
		want  []Keysym
		err   bool
	}{
		{"ctrl+shift+t", []Keysym{0xffe3, 0xffe1, 't'}, false},
		{"Return", []Keysym{0xff0d}, false},
		{"return", []Keysym{0xff0d}, false},
		{"super+Tab", []Keysym{0xffeb, 0xff09}, false},
		{"alt+F4", []Keysym{0xffe9, 0xffc1}, false},
		{"F12", []Keysym{0xffc9}, false},
		{"ctrl+A", []Keysym{0xffe3, 'A'}, false},
		{"ctrl++", []Keysym{0xffe3, '+'}, false},
		{"+", []Keysym{'+'}, false},
		{"ctrl+minus", []Keysym{0xffe3, '-'}, false},
		{"Page_Down", []Keysym{0xff56}, false},
		{"KP_Enter", []Keysym{0xff8d}, false},
		{"ctrl+é", []Keysym{0xffe3, 0xe9}, false},
		{"€", []Keysym{0x10020ac}, false},
		{"0xff0d", []Keysym{0xff0d}, false},
		{"XF86AudioMute", []Keysym{0x1008ff12}, false},
		{"", nil, true},
		{"ctrl+", nil, true},
		{"ctrl+nosuchkey", nil, true},
		{"F36", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.chord, func(t *testing.T) {
			got, err := ParseChord(tc.chord)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseChords(t *testing.T) {
	got, err := ParseChords("ctrl+a  BackSpace")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint([][]Keysym{{0xffe3, 'a'}, {0xff08}}) {
		t.Errorf("got %v", got)
	}
	if _, err := ParseChords("  "); err == nil {
		t.Error("want error for blank chords")
	}
}

func TestText(t *testing.T) {
	tests := []struct {
		text string
		want []Keysym
		err  bool
	}{
		{"aZ", []Keysym{'a', 'Z'}, false},
		{"a\nb", []Keysym{'a', 0xff0d, 'b'}, false},
		{"a\r\nb", []Keysym{'a', 0xff0d, 'b'}, false},
		{"\t", []Keysym{0xff09}, false},
		{"😀", []Keysym{0x101f600}, false},
		{"\u00a0", []Keysym{0xa0}, false},
		{"a\x1b", nil, true},
		{"\xff", nil, true},
	}
	for _, tc := range tests {
		got, err := Text(tc.text)
		if (err != nil) != tc.err {
			t.Fatalf("%q: err = %v, want error %v", tc.text, err, tc.err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: got %v, want %v", tc.text, got, tc.want)
		}
	}
}

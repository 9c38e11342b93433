package xinput

import (
	"fmt"
	"testing"

	"github.com/jezek/xgb/xproto"
)

func TestParseChord(t *testing.T) {
	tests := []struct {
		chord string
		want  []xproto.Keysym
		err   bool
	}{
		{"ctrl+shift+t", []xproto.Keysym{0xffe3, 0xffe1, 't'}, false},
		{"Return", []xproto.Keysym{0xff0d}, false},
		{"return", []xproto.Keysym{0xff0d}, false},
		{"super+Tab", []xproto.Keysym{0xffeb, 0xff09}, false},
		{"alt+F4", []xproto.Keysym{0xffe9, 0xffc1}, false},
		{"F12", []xproto.Keysym{0xffc9}, false},
		{"ctrl+A", []xproto.Keysym{0xffe3, 'A'}, false},
		{"ctrl++", []xproto.Keysym{0xffe3, '+'}, false},
		{"+", []xproto.Keysym{'+'}, false},
		{"ctrl+minus", []xproto.Keysym{0xffe3, '-'}, false},
		{"Page_Down", []xproto.Keysym{0xff56}, false},
		{"KP_Enter", []xproto.Keysym{0xff8d}, false},
		{"ctrl+é", []xproto.Keysym{0xffe3, 0xe9}, false},
		{"€", []xproto.Keysym{0x10020ac}, false},
		{"0xff0d", []xproto.Keysym{0xff0d}, false},
		{"XF86AudioMute", []xproto.Keysym{0x1008ff12}, false},
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
	if fmt.Sprint(got) != fmt.Sprint([][]xproto.Keysym{{0xffe3, 'a'}, {0xff08}}) {
		t.Errorf("got %v", got)
	}
	if _, err := ParseChords("  "); err == nil {
		t.Error("want error for blank chords")
	}
}

func TestTextKeysyms(t *testing.T) {
	tests := []struct {
		text string
		want []xproto.Keysym
		err  bool
	}{
		{"aZ", []xproto.Keysym{'a', 'Z'}, false},
		{"a\nb", []xproto.Keysym{'a', 0xff0d, 'b'}, false},
		{"a\r\nb", []xproto.Keysym{'a', 0xff0d, 'b'}, false},
		{"\t", []xproto.Keysym{0xff09}, false},
		{"😀", []xproto.Keysym{0x101f600}, false},
		{"\u00a0", []xproto.Keysym{0xa0}, false},
		{"a\x1b", nil, true},
		{"\xff", nil, true},
	}
	for _, tc := range tests {
		got, err := TextKeysyms(tc.text)
		if (err != nil) != tc.err {
			t.Fatalf("%q: err = %v, want error %v", tc.text, err, tc.err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: got %v, want %v", tc.text, got, tc.want)
		}
	}
}

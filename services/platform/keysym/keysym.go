// Package keysym turns xdotool-style key names, chords and text into X
// keysyms. It is pure: the display service injects the keysyms it returns,
// and the computer-use decoder checks a model's keys with it before a call
// reaches a display.
package keysym

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keysym is an X keysym; the display converts it to xgb's xproto.Keysym.
type Keysym uint32

// Keysyms of the keys the injector needs by name.
const (
	ShiftL   Keysym = 0xffe1
	ControlL Keysym = 0xffe3
	Return   Keysym = 0xff0d
	Tab      Keysym = 0xff09
)

// names maps lower-cased key names, as xdotool and computer-use models
// write them, to keysyms.
var names = func() map[string]Keysym {
	m := map[string]Keysym{
		// Modifiers.
		"shift": 0xffe1, "shift_l": 0xffe1, "lshift": 0xffe1, "shift_r": 0xffe2, "rshift": 0xffe2,
		"ctrl": 0xffe3, "control": 0xffe3, "ctrl_l": 0xffe3, "control_l": 0xffe3, "lctrl": 0xffe3,
		"ctrl_r": 0xffe4, "control_r": 0xffe4, "rctrl": 0xffe4,
		"alt": 0xffe9, "alt_l": 0xffe9, "lalt": 0xffe9, "option": 0xffe9, "alt_r": 0xffea, "ralt": 0xffea,
		"altgr": 0xfe03, "iso_level3_shift": 0xfe03,
		"meta": 0xffe7, "meta_l": 0xffe7, "meta_r": 0xffe8,
		"super": 0xffeb, "super_l": 0xffeb, "win": 0xffeb, "windows": 0xffeb, "cmd": 0xffeb, "command": 0xffeb,
		"super_r": 0xffec, "hyper": 0xffed, "hyper_l": 0xffed, "hyper_r": 0xffee,
		"caps_lock": 0xffe5, "capslock": 0xffe5, "num_lock": 0xff7f, "numlock": 0xff7f,
		"scroll_lock": 0xff14, "scrolllock": 0xff14,
		// Editing and navigation.
		"return": 0xff0d, "enter": 0xff0d, "linefeed": 0xff0a, "tab": 0xff09, "iso_left_tab": 0xfe20,
		"escape": 0xff1b, "esc": 0xff1b, "backspace": 0xff08, "back_space": 0xff08,
		"delete": 0xffff, "del": 0xffff, "insert": 0xff63, "ins": 0xff63,
		"home": 0xff50, "end": 0xff57, "begin": 0xff58,
		"page_up": 0xff55, "pageup": 0xff55, "prior": 0xff55, "pgup": 0xff55,
		"page_down": 0xff56, "pagedown": 0xff56, "next": 0xff56, "pgdn": 0xff56,
		"left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
		"space": 0x20, "print": 0xff61, "printscreen": 0xff61, "sys_req": 0xff15, "pause": 0xff13,
		"break": 0xff6b, "menu": 0xff67, "help": 0xff6a, "cancel": 0xff69, "undo": 0xff65,
		"redo": 0xff66, "find": 0xff68, "clear": 0xff0b,
		// Keypad.
		"kp_enter": 0xff8d, "kp_add": 0xffab, "kp_subtract": 0xffad, "kp_multiply": 0xffaa,
		"kp_divide": 0xffaf, "kp_decimal": 0xffae, "kp_separator": 0xffac, "kp_equal": 0xffbd,
		"kp_home": 0xff95, "kp_left": 0xff96, "kp_up": 0xff97, "kp_right": 0xff98, "kp_down": 0xff99,
		"kp_page_up": 0xff9a, "kp_prior": 0xff9a, "kp_page_down": 0xff9b, "kp_next": 0xff9b,
		"kp_end": 0xff9c, "kp_begin": 0xff9d, "kp_insert": 0xff9e, "kp_delete": 0xff9f, "kp_space": 0xff80, "kp_tab": 0xff89,
		// Punctuation by keysym name.
		"exclam": '!', "quotedbl": '"', "numbersign": '#', "dollar": '$', "percent": '%',
		"ampersand": '&', "apostrophe": '\'', "quoteright": '\'', "parenleft": '(', "parenright": ')',
		"asterisk": '*', "plus": '+', "comma": ',', "minus": '-', "period": '.', "slash": '/',
		"colon": ':', "semicolon": ';', "less": '<', "equal": '=', "greater": '>', "question": '?',
		"at": '@', "bracketleft": '[', "backslash": '\\', "bracketright": ']', "asciicircum": '^',
		"underscore": '_', "grave": '`', "quoteleft": '`', "braceleft": '{', "bar": '|',
		"braceright": '}', "asciitilde": '~',
		// Media keys.
		"xf86audioraisevolume": 0x1008ff13, "xf86audiolowervolume": 0x1008ff11, "xf86audiomute": 0x1008ff12,
		"xf86audioplay": 0x1008ff14, "xf86audiostop": 0x1008ff15, "xf86audioprev": 0x1008ff16,
		"xf86audionext": 0x1008ff17, "xf86back": 0x1008ff26, "xf86forward": 0x1008ff27,
		"xf86refresh": 0x1008ff29, "xf86search": 0x1008ff1b, "xf86homepage": 0x1008ff18,
		"xf86monbrightnessup": 0x1008ff02, "xf86monbrightnessdown": 0x1008ff03,
	}
	for i := 1; i <= 35; i++ {
		m[fmt.Sprintf("f%d", i)] = Keysym(0xffbe + i - 1)
	}
	for i := 0; i <= 9; i++ {
		m[fmt.Sprintf("kp_%d", i)] = Keysym(0xffb0 + i)
	}
	return m
}()

// Rune is the keysym that types r: Latin-1 characters are their own
// keysym, every other character is 0x01000000 plus its code point.
func Rune(r rune) Keysym {
	if r >= 0x20 && r <= 0x7e || r >= 0xa0 && r <= 0xff {
		return Keysym(r)
	}
	return Keysym(0x01000000 | uint32(r))
}

// Name resolves one key name: a name from the table (any case), a single
// character, or a keysym in hex ("0xff0d").
func Name(name string) (Keysym, error) {
	if name == "" {
		return 0, fmt.Errorf("empty key name")
	}
	if r, size := utf8.DecodeRuneInString(name); size == len(name) && r != utf8.RuneError {
		if r < 0x20 || r == 0x7f {
			return 0, fmt.Errorf("unknown key %q", name)
		}
		return Rune(r), nil
	}
	if sym, ok := names[strings.ToLower(name)]; ok {
		return sym, nil
	}
	var v uint32
	if n, err := fmt.Sscanf(strings.ToLower(name), "0x%x", &v); err == nil && n == 1 && v > 0 && v <= 0x1ffffff {
		return Keysym(v), nil
	}
	return 0, fmt.Errorf("unknown key %q (use names such as ctrl, alt, shift, super, Return, Tab, Escape, BackSpace, Page_Down, F5, a, 1)", name)
}

// ParseChord turns "ctrl+shift+t" into the keysyms to press in order.
// "ctrl++" and "+" name the plus key.
func ParseChord(chord string) ([]Keysym, error) {
	chord = strings.TrimSpace(chord)
	if chord == "" {
		return nil, fmt.Errorf("empty key chord")
	}
	var parts []string
	switch {
	case chord == "+":
		parts = []string{"+"}
	case strings.HasSuffix(chord, "++"):
		parts = append(strings.Split(strings.TrimSuffix(chord, "++"), "+"), "+")
	default:
		parts = strings.Split(chord, "+")
	}
	syms := make([]Keysym, 0, len(parts))
	for _, p := range parts {
		sym, err := Name(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("key chord %q: %w", chord, err)
		}
		syms = append(syms, sym)
	}
	return syms, nil
}

// ParseChords parses whitespace-separated chords, pressed one after the
// other as xdotool does ("ctrl+a BackSpace").
func ParseChords(s string) ([][]Keysym, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty key chord")
	}
	out := make([][]Keysym, 0, len(fields))
	for _, f := range fields {
		syms, err := ParseChord(f)
		if err != nil {
			return nil, err
		}
		out = append(out, syms)
	}
	return out, nil
}

// Text turns text into the keysyms that type it; newlines become
// Return and tabs Tab. Other control characters are refused.
func Text(text string) ([]Keysym, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("text is not valid UTF-8")
	}
	out := make([]Keysym, 0, len(text))
	for i, r := range text {
		switch {
		case r == '\n' || r == '\r':
			if r == '\n' && i > 0 && text[i-1] == '\r' {
				continue
			}
			out = append(out, Return)
		case r == '\t':
			out = append(out, Tab)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			return nil, fmt.Errorf("text holds control character %U", r)
		default:
			out = append(out, Rune(r))
		}
	}
	return out, nil
}

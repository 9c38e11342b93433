package atspi

import (
	"bufio"
	"encoding/xml"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestOSWorldXML writes a small tree as OSWorld's XML: the exact text for
// what its server would write (namespaces on the root, role names with
// dashes, states, attributes, component, value, actions, text), and a
// document an XML parser reads back with the namespaces resolved.
func TestOSWorldXML(t *testing.T) {
	tree := &Tree{Applications: []*Node{{
		Role: "application", Name: "Chromium", States: nil,
		Attributes: map[string]string{"toolkit": "Chromium", "bad key": "left out"},
		Children: []*Node{{
			Role: "frame", Name: `Form & "more" - Chromium`, States: []string{"active", "enabled", "showing", "visible"},
			Bounds: &Rect{X: 50, Y: 40, Width: 900, Height: 600},
			Children: []*Node{
				{Role: "push button", Name: "Press me", States: []string{"enabled", "focusable", "showing", "visible"},
					Bounds:        &Rect{X: 60, Y: -5, Width: 80, Height: 20},
					ActionDetails: []Action{{Name: "press", Description: "", KeyBinding: "<Alt>p"}, {Name: "press", Description: "again", KeyBinding: ""}}},
				{Role: "slider", Name: "", States: []string{"enabled"}, Bounds: &Rect{X: 1, Y: 2, Width: 3, Height: 4},
					HasValue: true, Value: 50, MinValue: 0, MaxValue: 1e16, Step: 0.00001},
				{Role: "paragraph", Text: "a<b>\ufffc\ttab\nline\x01", Image: true, Selection: true},
				{Role: "", Name: "line\nbreak"},
			},
		}},
	}}}
	got := OSWorldXML(tree)
	want := `<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes" xmlns:cp="https://accessibility.ubuntu.example.org/ns/component" xmlns:doc="https://accessibility.ubuntu.example.org/ns/document" xmlns:docattr="https://accessibility.ubuntu.example.org/ns/document/attributes" xmlns:txt="https://accessibility.ubuntu.example.org/ns/text" xmlns:val="https://accessibility.ubuntu.example.org/ns/value" xmlns:act="https://accessibility.ubuntu.example.org/ns/action">` +
		`<application name="Chromium" attr:toolkit="Chromium">` +
		`<frame name="Form &amp; &quot;more&quot; - Chromium" st:active="true" st:enabled="true" st:showing="true" st:visible="true" cp:screencoord="(50, 40)" cp:size="(900, 600)">` +
		`<push-button name="Press me" st:enabled="true" st:focusable="true" st:showing="true" st:visible="true" cp:screencoord="(60, -5)" cp:size="(80, 20)" act:press_desc="again" act:press_kb=""/>` +
		`<slider name="" st:enabled="true" val:value="50.0" val:min="0.0" val:max="1e+16" val:step="1e-05"/>` +
		`<paragraph name="" image="true" selection="true">a&lt;b&gt;	tab
line</paragraph>` +
		`<unknown name="line&#10;break"/>` +
		`</frame></application></desktop-frame>`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// A parser reads it, the prefixes resolved to OSWorld's namespaces.
	d := xml.NewDecoder(strings.NewReader(got))
	seen := map[string]bool{}
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("parse: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				seen[a.Name.Space+" "+a.Name.Local] = true
			}
		}
	}
	for _, k := range []string{
		"https://accessibility.ubuntu.example.org/ns/state showing",
		"https://accessibility.ubuntu.example.org/ns/component screencoord",
		"https://accessibility.ubuntu.example.org/ns/value max",
		"https://accessibility.ubuntu.example.org/ns/action press_kb",
		"https://accessibility.ubuntu.example.org/ns/attributes toolkit",
	} {
		if !seen[k] {
			t.Errorf("no attribute %s in the parsed document", k)
		}
	}

	if got := OSWorldXML(&Tree{}); !strings.HasPrefix(got, "<desktop-frame xmlns:st=") || !strings.HasSuffix(got, `/ns/action"/>`) {
		t.Errorf("an empty tree: %s", got)
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", -2.5: "-2.5", 0.1: "0.1", 100: "100.0", 1e15: "1000000000000000.0",
		1e16: "1e+16", 0.0001: "0.0001", 0.00001: "1e-05", 1.5e-7: "1.5e-07", 123456789.125: "123456789.125",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestWindowScore(t *testing.T) {
	w := Window{Title: "Untitled 1 - Mousepad", X: 100, Y: 80, Width: 640, Height: 480, Focused: true}
	for _, c := range []struct {
		name string
		n    Node
		want int
	}{
		{"same title and client area, active", Node{Name: w.Title, Bounds: &Rect{100, 80, 640, 480}, States: []string{"active"}}, 9},
		{"same title, a frame around it", Node{Name: w.Title, Bounds: &Rect{96, 50, 648, 514}}, 7},
		{"a title within the other", Node{Name: "Mousepad", Bounds: &Rect{0, 0, 10, 10}}, 2},
		{"mostly overlapping", Node{Name: "Other", Bounds: &Rect{150, 100, 640, 480}}, 1},
		{"another window", Node{Name: "Other", Bounds: &Rect{900, 700, 100, 100}}, 0},
		{"a frame far larger", Node{Name: "", Bounds: &Rect{0, 0, 1280, 800}}, 1},
		{"no extents", Node{Name: "Other"}, 0},
	} {
		if got := windowScore(&c.n, w); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestProcessFamily reads real processes: a shell and the sleep it
// started are one family, the test's own process is not in it, and a
// process that has exited is no one's.
func TestProcessFamily(t *testing.T) {
	sh := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL) })
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	procs, err := ReadProcesses([]int{os.Getpid(), sh.Process.Pid, sleep, ended.Process.Pid}, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	fam, ok := procs.Family(uint32(sh.Process.Pid))
	if !ok || !fam[uint32(sh.Process.Pid)] || !fam[uint32(sleep)] || fam[uint32(os.Getpid())] || len(fam) != 2 {
		t.Errorf("the shell's family: %v %v", fam, ok)
	}
	if fam, ok := procs.Family(uint32(sleep)); !ok || len(fam) != 1 {
		t.Errorf("the sleep's family: %v %v", fam, ok)
	}
	if _, ok := procs.Family(uint32(ended.Process.Pid)); ok {
		t.Errorf("a process that has exited has a family")
	}
}

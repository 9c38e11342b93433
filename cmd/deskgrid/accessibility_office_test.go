package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// openCalcSheet starts LibreOffice Calc in session id on a sheet of 40 rows
// by 8 columns, cell (r, c) holding r*c.
func openCalcSheet(t testing.TB, p *upProcess, id string) {
	t.Helper()
	var csv strings.Builder
	for r := 1; r <= 40; r++ {
		for c := 1; c <= 8; c++ {
			if c > 1 {
				csv.WriteString(",")
			}
			fmt.Fprintf(&csv, "%d", r*c)
		}
		csv.WriteString("\n")
	}
	data := base64.StdEncoding.EncodeToString([]byte(csv.String()))
	if out, code := p.execIn(id, "sh", "-c", "echo "+data+" | base64 -d > /tmp/sheet.csv && setsid -f soffice --calc --norestore --infilter=CSV:44,34,76,1 /tmp/sheet.csv >/dev/null 2>&1"); code != 0 {
		t.Fatalf("start Calc: %q (exit %d)", out, code)
	}
}

// cellOf finds a sheet's cell by its name (C3) in a tree.
func cellOf(tr *sandboxv1.GetAccessibilityTreeResponse, name string) *sandboxv1.AccessibleNode {
	for _, n := range deskgrid.FindAccessible(tr, "table cell", name) {
		if n.GetName() == name {
			return n
		}
	}
	return nil
}

// TestAccessibilityTreeOfACalcSheet: LibreOffice Calc's sheet claims every
// cell of the sheet as a child (2^31-1) and hangs when asked for them all;
// the tree holds the cells that show instead, each with its name, value
// and place, and is read well within the call's deadline.
func TestAccessibilityTreeOfACalcSheet(t *testing.T) {
	officeImages(t)
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	s := p.createWith(`{"image":"` + officeImage + `","display":{"width":1280,"height":800}}`)
	openCalcSheet(t, p, s.ID)
	tree := treeOver(t, p, s.ID)

	var c3 *sandboxv1.AccessibleNode
	var last string
	deadline := time.Now().Add(3 * time.Minute)
	for c3 == nil {
		code, tr, body := tree("?application=soffice&only_visible=true")
		if code != 200 {
			t.Fatalf("the tree of Calc: %d %s", code, body)
		}
		if c3 = cellOf(tr, "C3"); c3 != nil {
			if a1 := cellOf(tr, "A1"); a1 == nil || a1.GetValue() != 1 {
				t.Errorf("A1: %v", a1)
			}
			if cellOf(tr, "A2000") != nil {
				t.Error("a cell far off the screen is in the visible tree")
			}
			t.Logf("Calc's visible tree: %d nodes, %d cells", tr.GetNodeCount(), len(deskgrid.FindAccessible(tr, "table cell", "")))
			break
		}
		last = body
		if time.Now().After(deadline) {
			t.Fatalf("no cell C3 in Calc's tree:\n%.4000s", last)
		}
		time.Sleep(time.Second) // polled: Calc builds its tree as it loads the sheet
	}
	if c3.GetValue() != 9 || c3.GetBounds().GetWidth() <= 0 || !strings.Contains(strings.Join(c3.GetStates(), ","), "showing") {
		t.Errorf("C3: %v", c3)
	}
	// The sheet's table alone, by its id: the same cells.
	var table *sandboxv1.AccessibleNode
	code, tr, body := tree("?application=soffice&only_visible=true")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, n := range deskgrid.FindAccessible(tr, "table", "") {
		if len(n.GetChildren()) > 0 {
			table = n
		}
	}
	if table == nil {
		t.Fatalf("no table with cells in Calc's tree")
	}
	code, sub, body := tree("?only_visible=true&root=" + table.GetId())
	if code != 200 || cellOf(sub, "C3") == nil {
		t.Fatalf("the table's subtree: %d %.2000s", code, body)
	}
	// Without only_visible the tree still answers, saying it left cells out.
	code, all, body := tree("?application=soffice")
	if code != 200 || !all.GetTruncated() || cellOf(all, "C3") == nil {
		t.Fatalf("Calc's whole tree: %d truncated=%v %.2000s", code, all.GetTruncated(), body)
	}
}

// TestAccessibilityOfProgramsStartedAtOnce: programs started the moment
// the session is created, before anything reads its accessibility tree,
// are in the tree. LibreOffice looks for the accessibility bus once, at its
// start, so the session's bus and registry must be up before the create
// returns; it is launched through the API, Mousepad through exec, and the
// session runs one accessibility bus, the one the tree is read from.
func TestAccessibilityOfProgramsStartedAtOnce(t *testing.T) {
	officeImages(t)
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	s := p.createWith(`{"image":"` + officeImage + `","display":{"width":1280,"height":800}}`)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sess := p.sdkSession(ctx, t, s.ID)
	if out, code := p.execIn(s.ID, "sh", "-c", "setsid -f mousepad >/dev/null 2>&1"); code != 0 {
		t.Fatalf("start Mousepad: %q (exit %d)", out, code)
	}
	l, err := sess.Launch(ctx, "libreoffice-writer")
	if err != nil {
		t.Fatalf("launch LibreOffice Writer: %v", err)
	}
	if l.Window == nil {
		t.Fatalf("launched %v: no window", l.Application)
	}
	waitTitle(t, p, s.ID, "Mousepad")

	// Both windows show: each program has looked for the bus. Only now is
	// the tree read, for the first time.
	var last string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/accessibility?max_depth=2", "")
		tr := &sandboxv1.GetAccessibilityTreeResponse{}
		if code == 200 {
			if err := protojson.Unmarshal(body, tr); err != nil {
				t.Fatalf("tree %s: %v", body, err)
			}
			writer := deskgrid.FindAccessible(tr, "frame", "LibreOffice Writer")
			mousepad := deskgrid.FindAccessible(tr, "frame", "Mousepad")
			if len(writer) > 0 && len(mousepad) > 0 {
				break
			}
			last = dumpTree(tr)
		} else {
			last = fmt.Sprintf("%d %s", code, body)
		}
		if time.Now().After(deadline) {
			windows := []string{}
			for _, w := range p.windows(s.ID) {
				windows = append(windows, w.Title)
			}
			log, _ := p.execIn(s.ID, "sh", "-c", "cat /tmp/runtime-user/deskgrid-session.log; ps -eo pid,ppid,args")
			t.Fatalf("no LibreOffice Writer and Mousepad frames in the tree (windows %q):\n%s\nsession:\n%s", windows, last, log)
		}
		time.Sleep(time.Second) // polled: the programs build their trees as they start
	}
	if out, _ := p.execIn(s.ID, "sh", "-c", "pgrep -c -f '[d]bus-daemon.*accessibility.conf'"); out != "1" {
		t.Errorf("the session runs %s accessibility buses, want 1", out)
	}
}

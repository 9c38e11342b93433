package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// articlePage is a saved article page: a navigation bar, a table of
// contents, sections of linked text, a data table and a form — the shape of
// the pages agents read, at a size that fills a 1280x800 window and more.
func articlePage() string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Desktop sandboxes — deskgrid bench article</title>
<style>body{font:15px/1.5 sans-serif;margin:0}nav{background:#234;padding:6px}nav a{color:#fff;margin:0 6px}
main{display:flex}aside{width:220px;padding:8px;background:#eee}article{flex:1;padding:8px 16px}
table{border-collapse:collapse}td,th{border:1px solid #999;padding:2px 6px}</style></head><body><nav>`)
	for i := 1; i <= 24; i++ {
		fmt.Fprintf(&b, `<a href="#s%d">Topic %d</a>`, i, i)
	}
	b.WriteString(`</nav><main><aside><h2>Contents</h2><ol>`)
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, `<li><a href="#s%d">Section %d</a></li>`, i, i)
	}
	b.WriteString(`</ol></aside><article><h1>Isolated desktops for computer-use agents</h1>`)
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, `<h2 id="s%d">Section %d</h2>`, i, i)
		for j := 1; j <= 3; j++ {
			fmt.Fprintf(&b, `<p>Paragraph %d.%d: an agent sees the screen, reads the <a href="#s%d">accessibility tree</a> and acts with the mouse and keyboard; <em>every</em> action is recorded in the session's <a href="#h%d">history</a> so that a person can replay it later.</p>`, i, j, i%20+1, j)
		}
	}
	b.WriteString(`<h2>Figures</h2><table><tr><th>Run</th><th>Steps</th><th>Time</th><th>Result</th></tr>`)
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, `<tr><td>run %d</td><td>%d</td><td>%d s</td><td>done</td></tr>`, i, 10+i, 30+2*i)
	}
	b.WriteString(`</table><form onsubmit="return false"><label>Name <input name="name"></label> <label>Email <input name="email" type="email"></label>
<label><input type="checkbox" name="news"> News</label> <select name="plan"><option>Free</option><option>Team</option></select> <button>Send</button></form>
</article></main></body></html>`)
	return b.String()
}

// countNodes counts the nodes of a tree.
func countNodes(nodes []*sandboxv1.AccessibleNode) int {
	n := 0
	for _, c := range nodes {
		n += 1 + countNodes(c.GetChildren())
	}
	return n
}

// BenchmarkAccessibilityTree: the accessibility tree of one application
// through REST (GET /v1/sessions/{id}/accessibility?application=…,
// visible nodes only, as an agent asks for it beside a screenshot): Chromium
// showing a saved article page on the default desktop image, and
// LibreOffice Calc showing a sheet of 40 rows by 8 columns on the office
// image. Reported: the nodes in the tree and the p50 time of one read.
func BenchmarkAccessibilityTree(b *testing.B) {
	p := startUpOnDesktop(b, b.TempDir(), b.TempDir(), "-tenant-max-sessions", "0")
	defer p.stop()
	try := func(b *testing.B, id, query string) (*sandboxv1.GetAccessibilityTreeResponse, string) {
		b.Helper()
		code, body, _ := p.do("GET", "/v1/sessions/"+id+"/accessibility"+query, "")
		if code != 200 {
			return nil, fmt.Sprintf("%d %s", code, body)
		}
		tr := &sandboxv1.GetAccessibilityTreeResponse{}
		if err := protojson.Unmarshal(body, tr); err != nil {
			b.Fatal(err)
		}
		return tr, ""
	}
	read := func(b *testing.B, id, query string) *sandboxv1.GetAccessibilityTreeResponse {
		b.Helper()
		tr, failed := try(b, id, query)
		if tr == nil {
			b.Fatalf("tree %s: %s", query, failed)
		}
		return tr
	}
	// measure waits until ready says the tree shows the content, then reads
	// it b.N times.
	measure := func(b *testing.B, id, query string, ready func(*sandboxv1.GetAccessibilityTreeResponse) bool) {
		deadline := time.Now().Add(3 * time.Minute)
		for tr, failed := try(b, id, query); tr == nil || !ready(tr); tr, failed = try(b, id, query) {
			if time.Now().After(deadline) {
				var w strings.Builder
				_ = deskgrid.WriteAccessibilityTree(&w, tr)
				b.Fatalf("the application's tree never showed its content: %s\n%s", failed, w.String())
			}
			time.Sleep(500 * time.Millisecond) // polled: the session's bus comes up with its desktop, the application builds its tree as it loads
		}
		time.Sleep(2 * time.Second) // done loading
		var took []time.Duration
		nodes := 0
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			tr := read(b, id, query)
			took = append(took, time.Since(start))
			nodes = countNodes(tr.GetApplications())
		}
		b.StopTimer()
		b.ReportMetric(float64(nodes), "nodes")
		b.ReportMetric(p50(took), "p50-ms")
	}

	b.Run("chromium-article", func(b *testing.B) {
		s := p.createWith(`{"display":{"width":1280,"height":800}}`)
		defer p.deleteSession(b, s.ID)
		page := base64.StdEncoding.EncodeToString([]byte(articlePage()))
		if out, code := p.execIn(s.ID, "sh", "-c", "echo "+page+" | base64 -d > /tmp/article.html && setsid -f chromium --user-data-dir=/tmp/bench-profile --no-first-run --start-maximized file:///tmp/article.html >/dev/null 2>&1"); code != 0 {
			b.Fatalf("start Chromium: %q (exit %d)", out, code)
		}
		measure(b, s.ID, "?application=chrom&only_visible=true", func(tr *sandboxv1.GetAccessibilityTreeResponse) bool {
			return len(deskgrid.FindAccessible(tr, "link", "Section 20")) > 0
		})
	})

	b.Run("calc-sheet", func(b *testing.B) {
		officeImages(b)
		s := p.createWith(`{"image":"` + officeImage + `","display":{"width":1280,"height":800}}`)
		defer p.deleteSession(b, s.ID)
		waitPanel(b, p, s.ID)
		openCalcSheet(b, p, s.ID)
		measure(b, s.ID, "?application=soffice&only_visible=true", func(tr *sandboxv1.GetAccessibilityTreeResponse) bool {
			return cellOf(tr, "C3") != nil
		})
	})
}

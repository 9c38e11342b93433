package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// effectPage is one of two web pages, a and b, laid out alike: a button
// that changes colour, a link to the other page, a text field, a <select>,
// and a button whose handler changes the page two animation frames later.
func effectPage(name, other, bg string) string {
	return `<!doctype html>
<html><head><meta charset="utf-8"><title>deskgrid bench page ` + name + `</title>
<style>
body { margin: 0; background: ` + bg + `; font: 16px sans-serif; }
h1 { position: fixed; left: 40px; top: 20px; margin: 0; font-size: 40px; }
#go { position: fixed; left: 40px; top: 120px; width: 300px; height: 120px;
      border: 0; background: rgb(200, 30, 30); color: white; font-size: 28px; }
#go.on { background: rgb(30, 160, 60); }
#link { position: fixed; left: 40px; top: 300px; font-size: 32px; }
#field { position: fixed; left: 400px; top: 120px; width: 400px; height: 40px; font-size: 24px; }
#pick { position: fixed; left: 400px; top: 300px; width: 240px; height: 40px; font-size: 20px; }
#later { position: fixed; left: 40px; top: 500px; width: 300px; height: 120px; font-size: 24px; }
#out { position: fixed; left: 400px; top: 500px; width: 400px; height: 120px; font-size: 32px; background: #ddd; }
#out.on { background: #fc6; }
</style></head><body>
<h1>Page ` + name + `</h1>
<button id="go" type="button" onclick="this.classList.toggle('on')">Submit</button>
<a id="link" href="/` + other + `.html">Go to page ` + other + `</a>
<input id="field" value="deskgrid">
<select id="pick">` + options() + `</select>
<button id="later" type="button">Later</button>
<div id="out">none</div>
<script>
let n = 0;
document.getElementById('later').onclick = () => requestAnimationFrame(() => requestAnimationFrame(() => {
  const out = document.getElementById('out');
  out.textContent = 'clicked ' + (++n);
  out.classList.toggle('on');
}));
</script>
</body></html>`
}

func options() string {
	var sb strings.Builder
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&sb, "<option>Option %d</option>", i)
	}
	return sb.String()
}

// damageLog records when the screen of an X display changes (DAMAGE
// events on the root window, each taken at once as the display service's
// watcher does).
type damageLog struct {
	mu     sync.Mutex
	events []damageEvent
}

type damageEvent struct {
	at   time.Time
	rect xproto.Rectangle
}

func watchDamage(b *testing.B, xDisplay, xauth string) *damageLog {
	b.Helper()
	b.Setenv("XAUTHORITY", xauth)
	c, err := xgb.NewConnDisplay(xDisplay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	if err := xfixes.Init(c); err != nil {
		b.Fatal(err)
	}
	if err := damage.Init(c); err != nil {
		b.Fatal(err)
	}
	if _, err := xfixes.QueryVersion(c, 4, 0).Reply(); err != nil {
		b.Fatal(err)
	}
	if _, err := damage.QueryVersion(c, 1, 1).Reply(); err != nil {
		b.Fatal(err)
	}
	id, err := damage.NewDamageId(c)
	if err != nil {
		b.Fatal(err)
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	if err := damage.CreateChecked(c, id, xproto.Drawable(root), damage.ReportLevelBoundingBox).Check(); err != nil {
		b.Fatal(err)
	}
	l := &damageLog{}
	go func() {
		for {
			ev, err := c.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if n, ok := ev.(damage.NotifyEvent); ok {
				damage.Subtract(c, id, 0, 0)
				l.mu.Lock()
				l.events = append(l.events, damageEvent{at: time.Now(), rect: n.Area})
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// between returns the changes from from to until, leaving out thin ones
// (a text caret blinking).
func (l *damageLog) between(from, until time.Time) []damageEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []damageEvent
	for _, e := range l.events {
		if e.at.After(from) && !e.at.After(until) && !caretLike(e.rect) {
			out = append(out, e)
		}
	}
	return out
}

func caretLike(r xproto.Rectangle) bool { return r.Width <= 4 && r.Height <= 48 }

// waitQuiet waits until the screen has not changed (but for a caret) for
// quiet, at most 5 s.
func (l *damageLog) waitQuiet(quiet time.Duration) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		now := time.Now()
		if len(l.between(now.Add(-quiet), now)) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// diffBox is the bounding box of the pixels in which a and b differ.
func diffBox(a, b image.Image) image.Rectangle {
	var box image.Rectangle
	r := a.Bounds().Intersect(b.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				box = box.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return box
}

// BenchmarkDesktopClickEffects: clicks on the kinds of target a web page
// has, in the image's Chromium (two loopback pages alike: a button, a link
// to the other page, a text field clicked then typed in, a <select>, a
// button whose handler changes the page two animation frames later), each
// through REST with a settled screenshot; a sub-benchmark per settle quiet
// period (25, 30, 40 ms), b.N clicks on each kind. For each click: the times
// of the screen's changes in the second after it (DAMAGE, read from the
// host; a caret's blinking left out), the gaps between them, and whether a
// screenshot taken a second later differs from the settled one: a frame of
// the effect the settle missed (a caret's blinking alone is no miss).
// DESKGRID_BENCH_VERBOSE=1 prints every click.
func BenchmarkDesktopClickEffects(b *testing.B) {
	p, _ := startDesktopUp(b)
	defer p.stop()
	s := p.createWith(`{"display":{"width":1280,"height":800}}`)
	waitPanel(b, p, s.ID)
	goAt := func(img image.Image) string { return colourAt(img, 190, 180) }
	chromiumOnPages(b, p, s.ID, map[string]string{"index.html": effectPage("A", "b", "#f4f4f4"), "a.html": effectPage("A", "b", "#f4f4f4"), "b.html": effectPage("B", "a", "#e4ecf8")},
		func(img image.Image) string { return "button " + goAt(img) }, func(img image.Image) bool { return goAt(img) == "red" })
	time.Sleep(2 * time.Second)
	dl := watchDamage(b, s.XDisplay, xAuthOf(b, s.ID))

	kinds := effectKinds(0, 0)
	for _, q := range []time.Duration{25 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond} {
		b.Run(fmt.Sprintf("quiet-%dms", q.Milliseconds()), func(b *testing.B) {
			// Nothing of the previous run's clicks left in settle's history.
			time.Sleep(3 * time.Second)
			clickEffects(b, p, s.ID, dl, kinds, q)
		})
	}
}

// BenchmarkDesktopClickEffectsWindowed is BenchmarkDesktopClickEffects at
// the default quiet period with the pages in a maximized Chromium window,
// tabs and toolbar shown, as a browser started from the panel is: its tab
// shows a loading animation from the click on a link until the new page is
// drawn, which a kiosk window has nowhere to show.
func BenchmarkDesktopClickEffectsWindowed(b *testing.B) {
	p, _ := startDesktopUp(b)
	defer p.stop()
	s := p.createWith(`{"display":{"width":1280,"height":800}}`)
	waitPanel(b, p, s.ID)
	red := func(img image.Image) (int, int, bool) { // the top left of the button #go
		bounds := img.Bounds()
		for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
			for x := bounds.Min.X; x < bounds.Max.X; x++ {
				if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 > 180 && g>>8 < 60 && bl>>8 < 60 {
					return x, y, true
				}
			}
		}
		return 0, 0, false
	}
	chromiumOnPagesWith(b, p, s.ID, "--start-maximized", map[string]string{"index.html": effectPage("A", "b", "#f4f4f4"), "a.html": effectPage("A", "b", "#f4f4f4"), "b.html": effectPage("B", "a", "#e4ecf8")},
		func(image.Image) string { return "no red button" }, func(img image.Image) bool { _, _, ok := red(img); return ok })
	time.Sleep(2 * time.Second)
	x0, y0, _ := red(p.screenshot(s.ID))
	dx, dy := x0-40, y0-120 // where the page's (0,0) is on the screen
	dl := watchDamage(b, s.XDisplay, xAuthOf(b, s.ID))
	clickEffects(b, p, s.ID, dl, effectKinds(dx, dy), 40*time.Millisecond)
}

// effectKinds are the kinds of target of effectPage, with the page's
// (0,0) at dx,dy on the screen.
func effectKinds(dx, dy int) []clickKind {
	click := func(x, y int) string {
		return fmt.Sprintf(`{"click":{"at":{"x":%d,"y":%d},"button":"MOUSE_BUTTON_LEFT","clicks":1}}`, x+dx, y+dy)
	}
	return []clickKind{
		{"button", func(int) string { return click(190, 180) }, ""},
		{"link", func(int) string { return click(120, 320) }, ""},
		{"field-type", func(i int) string {
			return click(600, 140) + `,{"key":{"chord":"ctrl+a"}},{"type":{"text":"word ` + fmt.Sprint(i) + `"}}`
		}, ""},
		{"select", func(int) string { return click(520, 320) }, `{"key":{"chord":"Escape"}}`},
		{"raf", func(int) string { return click(190, 560) }, ""},
	}
}

// clickKind is a kind of target: the actions of its i-th click, and the
// actions that undo their effect (untimed) when the next click needs it.
type clickKind struct {
	name    string
	actions func(i int) string
	after   string
}

// clickEffects clicks b.N times on each kind of target, with settle's quiet
// period at quiet, and reports per kind the p50, the misses, the settles
// that saw no change and the gaps between the changes of an effect.
func clickEffects(b *testing.B, p *upProcess, id string, dl *damageLog, kinds []clickKind, quiet time.Duration) {
	type result struct {
		lat      time.Duration
		rest     time.Duration // lat less the settle wait
		miss     bool
		noChange bool
		gaps     []time.Duration
	}
	res := map[string][]result{}
	var missed []string
	verbose := os.Getenv("DESKGRID_BENCH_VERBOSE") != ""
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range kinds {
			dl.waitQuiet(300 * time.Millisecond)
			body := `{"actions":[` + k.actions(i) + `],"screenshot":true,"settle":{"quiet":"` + fmt.Sprintf("%.3fs", quiet.Seconds()) + `"}}`
			start := time.Now()
			code, out, _ := p.do("POST", "/v1/sessions/"+id+"/actions", body)
			lat := time.Since(start)
			if code != 200 {
				b.Fatalf("%s: %d %s", k.name, code, out)
			}
			var r struct {
				Screenshot struct {
					Data []byte `json:"data"`
				} `json:"screenshot"`
				Settle struct {
					Outcome     string `json:"outcome"`
					FirstChange string `json:"firstChange"`
					Waited      string `json:"waited"`
				} `json:"settle"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				b.Fatal(err)
			}
			settled, err := png.Decode(bytes.NewReader(r.Screenshot.Data))
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Until(start.Add(time.Second)))
			later := p.screenshot(id)
			evs := dl.between(start, start.Add(time.Second))
			var gaps []time.Duration
			var times []string
			for j, e := range evs {
				times = append(times, fmt.Sprint(e.at.Sub(start).Milliseconds()))
				if j > 0 {
					gaps = append(gaps, e.at.Sub(evs[j-1].at))
				}
			}
			box := diffBox(settled, later)
			miss := !box.Empty() && !(box.Dx() <= 4 && box.Dy() <= 48)
			waited, _ := time.ParseDuration(r.Settle.Waited)
			res[k.name] = append(res[k.name], result{lat: lat, rest: lat - waited, miss: miss, noChange: r.Settle.Outcome == "SETTLE_OUTCOME_NO_CHANGE", gaps: gaps})
			line := fmt.Sprintf("%s quiet %v: answered at %d ms (%s, first change %s, waited %s), changes at %s ms, later screenshot differs in %v", k.name, quiet, lat.Milliseconds(), r.Settle.Outcome, r.Settle.FirstChange, r.Settle.Waited, strings.Join(times, " "), box)
			if miss {
				missed = append(missed, line)
			}
			if verbose {
				fmt.Println(line)
			}
			if k.after != "" {
				if code, out, _ := p.do("POST", "/v1/sessions/"+id+"/actions", `{"actions":[`+k.after+`]}`); code != 200 {
					b.Fatalf("%s undo: %d %s", k.name, code, out)
				}
			}
		}
	}
	b.StopTimer()
	bounds := []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second}
	for _, k := range kinds {
		var all, ls, rest []time.Duration
		misses, noChange := 0, 0
		for _, r := range res[k.name] {
			all = append(all, r.gaps...)
			ls = append(ls, r.lat)
			rest = append(rest, r.rest)
			if r.miss {
				misses++
			}
			if r.noChange {
				noChange++
			}
		}
		counts := make([]int, len(bounds))
		for _, g := range all {
			for j, bd := range bounds {
				if g < bd {
					counts[j]++
					break
				}
			}
		}
		var sb strings.Builder
		prev := time.Duration(0)
		for j, bd := range bounds {
			fmt.Fprintf(&sb, " [%v,%v):%d", prev, bd, counts[j])
			prev = bd
		}
		in2040 := counts[3] + counts[4]
		fmt.Printf("%s quiet %v: %d clicks, gaps between changes:%s; in [20ms,40ms): %d of %d\n", k.name, quiet, len(ls), sb.String(), in2040, len(all))
		b.ReportMetric(p50(ls), k.name+"-p50-ms")
		b.ReportMetric(p50(rest), k.name+"-not-waiting-p50-ms")
		b.ReportMetric(float64(misses), k.name+"-misses")
		b.ReportMetric(float64(noChange), k.name+"-no-change")
		b.ReportMetric(float64(in2040), k.name+"-gaps-20-40ms")
		b.ReportMetric(float64(len(all)), k.name+"-gaps")
	}
	for _, m := range missed {
		fmt.Println("missed: " + m)
	}
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
)

// The task suite: real tasks on a real desktop, each carried out by the
// agent loop driven by a scripted model speaking one provider's wire
// format, and each judged by its outcome on the session (what the local
// web server received, what is in the files), never by the model's word.
//
// The pages come from a small web server the suite starts in the session,
// on the session's own loopback (port 8765), which logs every request it
// gets to /tmp/dgsite/log. The models start Chromium and the desktop's
// applications from the bash tool, as the providers' reference agents do,
// and work them mostly with the keyboard, so a layout change does not
// break them.
//
// By default each task runs once, the providers taking turns; with
// DESKGRID_TASKS_ALL=1 each runs once per provider, and with
// DESKGRID_TASKS_REPEAT=n n times in a row (each run judged on its own).
// DESKGRID_TASKS_REPORT names a file the success share per provider is
// written to (Markdown).
//
// A task may name an image: it runs on a session of that image (the office
// task on the desktop image with LibreOffice), started on first use.

const siteServer = `import http.server, urllib.parse, os
root = '/tmp/dgsite'
log = open(root + '/log', 'a', buffering=1)
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(s, *a, **k):
        super().__init__(*a, directory=root + '/www', **k)
    def log_message(s, *a):
        pass
    def end_headers(s):
        s.send_header('Cache-Control', 'no-store')
        super().end_headers()
    def do_GET(s):
        log.write('GET ' + s.path + '\n')
        if s.path.startswith('/ready'):
            s.send_response(204); s.end_headers(); return
        super().do_GET()
    def do_POST(s):
        n = int(s.headers.get('Content-Length') or 0)
        body = s.rfile.read(n).decode()
        log.write('POST ' + s.path + ' ' + body + '\n')
        if s.path == '/login':
            s.send_response(303); s.send_header('Location', '/account.html'); s.end_headers(); return
        s.send_response(200); s.send_header('Content-Type', 'text/html'); s.end_headers()
        s.wfile.write(b'<!doctype html><h1 style="font-size:60px">Received</h1>')
http.server.ThreadingHTTPServer(('127.0.0.1', 8765), H).serve_forever()
`

const site = "http://127.0.0.1:8765"

// page makes a page of the local site: big fields, one a row, so a click
// (Gemini's way to type) lands on the field whatever the browser's frame;
// it tells the server once it is shown and has the keyboard, what a model
// sees as the caret in its first field, and once it got a first key.
func page(name, body string) string {
	return `<!doctype html><html><head><meta charset="utf-8"><title>` + name + `</title><style>
body{margin:0;font:28px sans-serif}
input,select,textarea,button{display:block;box-sizing:border-box;width:1000px;height:100px;margin:0 0 20px 20px;font-size:36px}
textarea{height:220px}
a{display:block;font-size:36px;height:100px;margin-left:20px}
label.box{display:block;height:100px;margin-left:20px;font-size:36px}
label.box input{display:inline;width:40px;height:40px}
</style></head><body>` + body + `<script>
addEventListener('keydown', e => { if (e.key === 'Shift' && !window.dgKeys) { window.dgKeys = 1; fetch('/keys?page=' + document.title) } }, true);
addEventListener('load', () => { const t = setInterval(() => { if (document.hasFocus()) { clearInterval(t); fetch('/ready?page=` + name + `') } }, 50) });
</script></body></html>`
}

// row is the screen height of the n-th row of a page (0-based): Chromium's
// frame takes about 110 pixels above the page, each row 120 pixels.
func row(n int) int { return 110 + 70 + 120*n }

var pages = map[string]string{
	"form.html": page("form", `<form method="post" action="/submit/contact">
<input name="name" autofocus placeholder="Name"><input name="email" placeholder="Email"><button>Send</button></form>`),
	"links.html":  page("links", `<a href="/first.html">First</a><a href="/second.html">Second</a><a href="/third.html">Third</a>`),
	"first.html":  page("first", `<h1>First</h1>`),
	"second.html": page("second", `<h1>Second</h1>`),
	"third.html":  page("third", `<h1>Third</h1>`),
	"download.html": page("download", `<a id="d" href="/report.csv" download="report.csv" autofocus>Download the report</a>
<script>document.getElementById('d').focus()</script>`),
	"report.csv": "region,total\nnorth,42\nsouth,17\n",
	"select.html": page("select", `<form method="post" action="/submit/plan">
<select name="plan" autofocus><option>basic</option><option>standard</option><option>premium</option></select><button>Choose</button></form>`),
	"choices.html": page("choices", `<form method="post" action="/submit/choices">
<label class="box"><input type="checkbox" name="terms" value="yes" autofocus> I agree</label>
<label class="box"><input type="radio" name="size" value="small" checked> Small</label>
<label class="box"><input type="radio" name="size" value="medium"> Medium</label>
<label class="box"><input type="radio" name="size" value="large"> Large</label>
<button>Order</button></form>`),
	"notes.html": page("notes", `<form id="f" method="post" action="/submit/notes"><textarea name="notes" autofocus></textarea><button>Save</button></form>
<script>document.querySelector('textarea').addEventListener('keydown', e => { if (e.ctrlKey && e.key === 'Enter') document.getElementById('f').submit() })</script>`),
	"button.html": page("button", `<button id="b" style="height:560px" onclick="fetch('/clicked?what=big-button')">Press me</button>`),
	"menu.html": page("menu", `<button id="open" autofocus>Actions</button><div id="menu" hidden>
<button data-v="rename">Rename</button><button data-v="archive">Archive</button><button data-v="delete">Delete</button></div>
<script>
const menu = document.getElementById('menu');
document.getElementById('open').onclick = () => setTimeout(() => {
  menu.hidden = false; menu.querySelector('button').focus();
  // Once the open menu is drawn.
  requestAnimationFrame(() => requestAnimationFrame(() => fetch('/ready?page=menu-open')));
}, 300);
menu.onclick = e => fetch('/submit/menu', {method: 'POST', body: 'choice=' + e.target.dataset.v});
menu.onkeydown = e => {
  const items = [...menu.querySelectorAll('button')], i = items.indexOf(document.activeElement);
  if (e.key === 'ArrowDown') { items[(i + 1) % items.length].focus(); e.preventDefault() }
  if (e.key === 'ArrowUp') { items[(i + items.length - 1) % items.length].focus(); e.preventDefault() }
};
</script>`),
	"late.html": page("late", `<div id="slot">Loading…</div>
<script>setTimeout(() => {
  document.getElementById('slot').innerHTML = '<form method="post" action="/submit/late"><input name="code" placeholder="Code"></form>';
  const i = document.querySelector('input'); i.focus(); fetch('/ready?page=late-form');
}, 1200)</script>`),
	"login.html": page("login", `<form method="post" action="/login">
<input name="user" autofocus placeholder="User"><input name="password" type="password" placeholder="Password"><button>Sign in</button></form>`),
	"account.html": page("account", `<form method="post" action="/submit/account"><input name="city" autofocus placeholder="City"><button>Save</button></form>`),
	"tab.html":     page("tab", `<h1>A second tab</h1>`),
	"search.html":  page("search", `<form method="get" action="/results.html"><input name="q" autofocus placeholder="Search"></form>`),
	"results.html": page("results", `<h1>Results</h1>`),
}

// taskEnv is the shared desktop the tasks run on.
type taskEnv struct {
	p       *upProcess
	id      string
	image   bool
	program map[string]bool
	// home is the session user's home, where the editor tool works.
	home string
	// others are the sessions on other images, by image, that tasks
	// naming an image run on.
	mu     sync.Mutex
	others map[string]*taskEnv
}

// shell runs a command in the session's persistent shell (the one the
// agent's bash tool uses) and returns its output.
func (e *taskEnv) shell(t testing.TB, cmd string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": cmd, "timeout": "60s"})
	code, out, _ := e.p.do("POST", "/v1/sessions/"+e.id+"/shell:run", string(body))
	var r struct {
		Output   []byte `json:"output"`
		ExitCode int    `json:"exitCode"`
	}
	if err := json.Unmarshal(out, &r); code != http.StatusOK || err != nil {
		// Not Fatal: a scripted model's looks run on its server's
		// goroutines.
		t.Errorf("shell %q: %d %s", cmd, code, out)
		return ""
	}
	return string(r.Output)
}

// siteLog is what the local server received, one request a line.
func (e *taskEnv) siteLog(t testing.TB) string { return e.shell(t, "cat /tmp/dgsite/log") }

func (e *taskEnv) received(t testing.TB, line string) func() bool {
	return func() bool { return containsLine(e.siteLog(t), line) }
}

func containsLine(log, line string) bool {
	for _, l := range strings.Split(log, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func (e *taskEnv) fileIs(t testing.TB, path, want string) func() bool {
	return func() bool { return e.shell(t, "cat "+path+" 2>/dev/null") == want }
}

// browser is the command a model runs to open Chromium on a page.
func browser(task, path string) string {
	return fmt.Sprintf(`(chromium --no-sandbox --no-first-run --no-default-browser-check --disable-gpu --password-store=basic `+
		`--disable-features=Translate,MediaRouter --disable-session-crashed-bubble --user-data-dir=$(mktemp -d /tmp/dgb-%s-XXXXXX) `+
		`--window-position=0,0 --window-size=1280,800 '%s%s' >/tmp/dgb-%s.log 2>&1 & echo $! >> /tmp/dgapps.pid)`, task, site, path, task)
}

// ready is a look that waits for a page of the site to be shown, in the
// window that has the keyboard (its title is the page's), and to take keys.
// Chromium may drop the first key a page is sent after the page says it
// has the focus (a select's Down, a checkbox's Space: in about one run of
// three on a loaded machine, whichever provider's model sent it); so the
// model presses Shift, which no page acts on, until the page has seen one,
// as a model that sees its key had no effect tries again.
func (e *taskEnv) ready(t testing.TB, name string) move {
	title := strings.Split(name, "-")[0]
	shown, focused, keyed := e.received(t, "GET /ready?page="+name), e.windowFocused(t, title+" - Chromium"), e.received(t, "GET /keys?page="+title)
	mv := look("the page "+name+" taking keys", func() bool { return shown() && focused() && keyed() })
	mv.press = []string{"shift"}
	return mv
}

// clipboardHas tells whether the session's CLIPBOARD holds text with s.
func (e *taskEnv) clipboardHas(t testing.TB, s string) func() bool {
	return func() bool {
		code, out, _ := e.p.do("GET", "/v1/sessions/"+e.id+"/clipboard", "")
		return code == http.StatusOK && strings.Contains(string(out), s)
	}
}

// suiteTask is one task: its moves and the check of its outcome.
type suiteTask struct {
	name string
	// needs are the programs the task starts; it is skipped where the
	// session lacks one.
	needs []string
	// image, when set, is the image of the session the task runs on
	// instead of the suite's.
	image  string
	prompt string
	moves  func(e *taskEnv, t testing.TB) []move
	// check tells whether the session is in the state the task asks for,
	// and describes what it found.
	check func(e *taskEnv, t testing.TB) (bool, string)
	// cleanup is a command run in the session after each run, besides
	// ending what the run started.
	cleanup string
}

func logHas(line string) func(e *taskEnv, t testing.TB) (bool, string) {
	return func(e *taskEnv, t testing.TB) (bool, string) {
		log := e.siteLog(t)
		return containsLine(log, line), "the server received:\n" + log
	}
}

func fileHas(path, want string) func(e *taskEnv, t testing.TB) (bool, string) {
	return func(e *taskEnv, t testing.TB) (bool, string) {
		got := e.shell(t, "cat "+path+" 2>&1")
		return got == want, fmt.Sprintf("%s: %q, want %q", path, got, want)
	}
}

var suiteTasks = []suiteTask{
	{
		name: "browser-form", needs: []string{"chromium"}, prompt: "Open the contact form and send it as Ada Lovelace, ada@example.org.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("form", "/form.html")), e.ready(t, "form"),
				typeAt(500, row(0), "Ada Lovelace"), keys("Tab"), typeEnterAt(500, row(1), "ada@example.org")}
		},
		check: logHas("POST /submit/contact name=Ada+Lovelace&email=ada%40example.org"),
	},
	{
		name: "browser-links", needs: []string{"chromium"}, prompt: "Open the list of links and follow the second one.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("links", "/links.html")), e.ready(t, "links"),
				keys("Tab"), keys("Tab"), keys("Return"), e.ready(t, "second")}
		},
		check: logHas("GET /second.html"),
	},
	{
		name: "browser-download", needs: []string{"chromium"}, prompt: "Download the report from the local site into ~/Downloads.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash("rm -rf ~/Downloads/report.csv; " + browser("download", "/download.html")), e.ready(t, "download"),
				click(400, row(0)), look("the download", e.fileIs(t, "~/Downloads/report.csv", pages["report.csv"]))}
		},
		check: func(e *taskEnv, t testing.TB) (bool, string) {
			ok, desc := fileHas("~/Downloads/report.csv", pages["report.csv"])(e, t)
			return ok, desc + "; in ~/Downloads: " + e.shell(t, "ls -la ~/Downloads 2>&1")
		},
	},
	{
		name: "browser-select", needs: []string{"chromium"}, prompt: "Choose the premium plan and submit.",
		moves: func(e *taskEnv, t testing.TB) []move {
			// A closed select takes arrows; Tab then Enter submits.
			return []move{bash(browser("select", "/select.html")), e.ready(t, "select"),
				keys("Down"), keys("Down"), keys("Tab"), keys("Return")}
		},
		check: logHas("POST /submit/plan plan=premium"),
	},
	{
		name: "browser-checkbox-radio", needs: []string{"chromium"}, prompt: "Agree to the terms, pick the large size and order.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("choices", "/choices.html")), e.ready(t, "choices"),
				keys("space"), keys("Tab"), keys("Down"), keys("Down"), keys("Tab"), keys("Return")}
		},
		check: logHas("POST /submit/choices terms=yes&size=large"),
	},
	{
		name: "browser-textarea", needs: []string{"chromium"}, prompt: "Write the two-line note and save it.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("notes", "/notes.html")), e.ready(t, "notes"),
				typeAt(500, row(0)+40, "first line\nsecond line"), keys("ctrl+Return")}
		},
		check: logHas("POST /submit/notes notes=first+line%0D%0Asecond+line"),
	},
	{
		name: "browser-mouse-click", needs: []string{"chromium"}, prompt: "Press the big button.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("button", "/button.html")), e.ready(t, "button"), click(500, row(2))}
		},
		check: logHas("GET /clicked?what=big-button"),
	},
	{
		name: "browser-menu", needs: []string{"chromium"}, prompt: "Archive the item through the Actions menu.",
		moves: func(e *taskEnv, t testing.TB) []move {
			// The menu opens 300 ms after the press: the model looks until
			// it sees it open, its first item with the keyboard.
			return []move{bash(browser("menu", "/menu.html")), e.ready(t, "menu"),
				keys("Return"), e.ready(t, "menu-open"), keys("Down"), keys("Return")}
		},
		check: logHas("POST /submit/menu choice=archive"),
	},
	{
		name: "browser-late-content", needs: []string{"chromium"}, prompt: "Enter the code 7431 once the form shows.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("late", "/late.html")), e.ready(t, "late-form"), typeEnterAt(500, row(0), "7431")}
		},
		check: logHas("POST /submit/late code=7431"),
	},
	{
		name: "browser-login", needs: []string{"chromium"}, prompt: "Sign in as grace with password hopper1906, then set the city to Arlington.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("login", "/login.html")), e.ready(t, "login"),
				typeAt(500, row(0), "grace"), keys("Tab"), typeEnterAt(500, row(1), "hopper1906"),
				e.ready(t, "account"), typeEnterAt(500, row(0), "Arlington")}
		},
		check: func(e *taskEnv, t testing.TB) (bool, string) {
			log := e.siteLog(t)
			return containsLine(log, "POST /login user=grace&password=hopper1906") && containsLine(log, "POST /submit/account city=Arlington"), log
		},
	},
	{
		name: "browser-new-tab", needs: []string{"chromium"}, prompt: "Open the tab page in a new tab.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("tab", "/first.html")), e.ready(t, "first"),
				keys("ctrl+t"), look("a new tab", nil), keys("ctrl+l"), typeEnterAt(500, 60, site+"/tab.html"), e.ready(t, "tab")}
		},
		check: logHas("GET /tab.html"),
	},
	{
		name: "browser-search", needs: []string{"chromium"}, prompt: "Search the local site for deskgrid.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash(browser("search", "/search.html")), e.ready(t, "search"), typeEnterAt(500, row(0), "deskgrid"), e.ready(t, "results")}
		},
		check: logHas("GET /results.html?q=deskgrid"),
	},
	{
		name: "bash-command", prompt: "Count the lines of /etc/passwd-like data into ~/work/count.txt.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash("mkdir -p ~/work && printf 'a\\nb\\nc\\n' > ~/work/data.txt"),
				bash("wc -l < ~/work/data.txt > ~/work/count.txt && cat ~/work/count.txt")}
		},
		check: fileHas("~/work/count.txt", "3\n"),
	},
	{
		name: "editor-tool", prompt: "Write the config file and switch its mode to fast.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash("mkdir -p ~/work"), create(e.home+"/work/app.conf", "name = demo\nmode = slow\n"),
				replace(e.home+"/work/app.conf", "mode = slow", "mode = fast")}
		},
		check: fileHas("~/work/app.conf", "name = demo\nmode = fast\n"),
	},
	{
		name: "terminal", needs: []string{"lxterminal"}, prompt: "In a terminal, write 6 times 7 to ~/work/answer.txt.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash("mkdir -p ~/work; rm -f ~/work/answer.txt; (lxterminal --working-directory=$HOME/work >/dev/null 2>&1 & echo $! >> /tmp/dgapps.pid)"),
				look("the terminal's prompt", e.windowNamed(t, "~/work")), typeEnterAt(640, 400, "echo $((6*7)) > answer.txt")}
		},
		check: fileHas("~/work/answer.txt", "42\n"),
	},
	{
		name: "text-editor", needs: []string{"mousepad"}, prompt: "Open the shopping list in the text editor, add milk and save.",
		moves: func(e *taskEnv, t testing.TB) []move {
			return []move{bash("mkdir -p ~/work; printf 'eggs\\n' > ~/work/list.txt; (mousepad ~/work/list.txt >/dev/null 2>&1 & echo $! >> /tmp/dgapps.pid)"),
				look("the editor", e.windowNamed(t, "list.txt")), keys("ctrl+End"), appendAt(640, 400, "milk\n"), keys("ctrl+s"),
				look("the saved file", e.fileIs(t, "~/work/list.txt", "eggs\nmilk\n"))}
		},
		check: fileHas("~/work/list.txt", "eggs\nmilk\n"),
	},
	{
		name: "file-manager", needs: []string{"thunar"}, prompt: "Move invoice.pdf from the inbox folder to the archive folder with the file manager.",
		moves: func(e *taskEnv, t testing.TB) []move {
			// Nothing of an earlier attempt stays on the clipboard (once
			// the display has the last run's lease back).
			for deadline := time.Now().Add(30 * time.Second); ; {
				code, out, _ := e.p.do("POST", "/v1/sessions/"+e.id+"/clipboard", `{"text":"-"}`)
				if code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("clear the clipboard: %d %s", code, out)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			// A program may drop the first key it is sent once its window
			// has the keyboard, as Chromium does: the model selects and
			// cuts until it sees the file cut.
			cut := look("the file cut", e.clipboardHas(t, "inbox/invoice.pdf"))
			cut.press = []string{"ctrl+a", "ctrl+x"}
			return []move{bash("rm -rf ~/work/inbox ~/work/archive; mkdir -p ~/work/inbox ~/work/archive; echo pdf > ~/work/inbox/invoice.pdf; (thunar ~/work/inbox >/dev/null 2>&1 & echo $! >> /tmp/dgapps.pid)"),
				look("the file manager", e.windowFocused(t, "inbox")), cut,
				// The location bar keeps the keyboard once a click put it
				// there (Gemini types by clicking where it types), and ctrl+v
				// would paste the file's path into it: a click on the list
				// of files gives it the keyboard, as a person would.
				keys("ctrl+l"), typeEnterAt(700, 195, e.home+"/work/archive"), look("the archive folder", e.windowFocused(t, "archive")),
				click(700, 400), keys("ctrl+v"),
				look("the moved file", e.fileIs(t, "~/work/archive/invoice.pdf", "pdf\n"))}
		},
		check: func(e *taskEnv, t testing.TB) (bool, string) {
			got := e.shell(t, "ls ~/work/inbox ~/work/archive")
			return strings.Contains(got, "archive:\ninvoice.pdf") && !strings.Contains(got, "inbox:\ninvoice.pdf"), got
		},
	},
	officeTask,
}

// windowFocused tells whether a window whose title holds name has the
// keyboard.
func (e *taskEnv) windowFocused(t testing.TB, name string) func() bool {
	return func() bool {
		for _, w := range e.p.windows(e.id) {
			if strings.Contains(w.Title, name) && w.Focused {
				return true
			}
		}
		return false
	}
}

// windowNamed tells whether a window whose title holds name is on screen.
func (e *taskEnv) windowNamed(t testing.TB, name string) func() bool {
	return func() bool {
		for _, w := range e.p.windows(e.id) {
			if strings.Contains(w.Title, name) {
				return true
			}
		}
		return false
	}
}

var suiteProviders = []string{"anthropic", "openai", "gemini"}

// TestTaskSuite runs the task suite on one desktop session.
func TestTaskSuite(t *testing.T) {
	e := startTaskEnv(t)
	// first counts the tasks done at the first attempt; a task not done is
	// tried again from the start (three attempts in all), as an agent that
	// sees it failed would, and ok counts those done in the end.
	type result struct{ first, ok, total int }
	results := map[string]*result{}
	for _, pr := range suiteProviders {
		results[pr] = &result{}
	}
	var failed []string
	all := os.Getenv("DESKGRID_TASKS_ALL") != ""
	repeat := 1
	if v := os.Getenv("DESKGRID_TASKS_REPEAT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DESKGRID_TASKS_REPEAT=%q: want a count of runs, 1 or more", v)
		}
		repeat = n
	}
	for i, task := range suiteTasks {
		providers := []string{suiteProviders[i%len(suiteProviders)]}
		if all {
			providers = suiteProviders
		}
		for _, pr := range providers {
			for range repeat {
				t.Run(task.name+"/"+pr, func(t *testing.T) {
					te := e
					if task.image != "" {
						if !e.image {
							t.Skipf("the suite runs on the machine's own programs; the task needs the image %s", task.image)
						}
						te = e.on(t, task.image)
					}
					for _, prog := range task.needs {
						if !te.program[prog] {
							t.Skipf("the session has no %s", prog)
						}
					}
					results[pr].total++
					ok, desc := te.run(t, task, pr)
					if ok {
						results[pr].first++
					}
					for attempt := 2; !ok && attempt <= 3; attempt++ {
						t.Logf("%s by %s, attempt %d: %s", task.name, pr, attempt-1, desc)
						ok, desc = te.run(t, task, pr)
					}
					if !ok {
						failed = append(failed, task.name+"/"+pr)
						t.Errorf("%s by %s: %s", task.name, pr, desc)
						return
					}
					results[pr].ok++
				})
			}
		}
	}
	var report strings.Builder
	fmt.Fprintf(&report, "| provider | tasks done | share | done at the first attempt |\n|---|---|---|---|\n")
	total, done, first := 0, 0, 0
	keys := make([]string, 0, len(results))
	for pr := range results {
		keys = append(keys, pr)
	}
	sort.Strings(keys)
	for _, pr := range keys {
		r := results[pr]
		total += r.total
		done += r.ok
		first += r.first
		fmt.Fprintf(&report, "| %s | %d/%d | %.0f%% | %d/%d (%.0f%%) |\n", pr, r.ok, r.total, pct(r.ok, r.total), r.first, r.total, pct(r.first, r.total))
	}
	fmt.Fprintf(&report, "| all | %d/%d | %.0f%% | %d/%d (%.0f%%) |\n", done, total, pct(done, total), first, total, pct(first, total))
	t.Logf("task suite (%s desktop):\n%s", map[bool]string{true: "image", false: "host"}[e.image], report.String())
	if path := os.Getenv("DESKGRID_TASKS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(failed) > 0 {
		t.Errorf("tasks not done: %v", failed)
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(max(of, 1)) }

// startTaskEnv starts deskgrid with a session on the default desktop
// image when it is built (Chromium, a terminal, a text editor, a file
// manager), on the machine's own programs otherwise, and the local web
// server in it.
func startTaskEnv(t *testing.T) *taskEnv {
	e := &taskEnv{}
	args := []string{"-provider-base-urls", "http://127.0.0.1:*"}
	if os.Getenv("DESKGRID_TASKS_HOST") == "" && desktopImageBuilt() {
		e.image = true
		e.p = startUpOnDesktop(t, t.TempDir(), t.TempDir(), args...)
	} else {
		e.p = startUp(t, t.TempDir(), t.TempDir(), args...)
	}
	t.Cleanup(e.p.stop)
	s := e.p.createWith(fmt.Sprintf(`{"display":{"width":%d,"height":%d},"idleTimeout":"1800s"}`, taskScreenW, taskScreenH))
	e.id = s.ID
	if e.image {
		// The desktop is drawn (its panel shown) before the first task.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			ok, desc := panelShown(e.p.screenshot(e.id))
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no panel on the session's screen: %s", desc)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	e.home = strings.TrimSpace(e.shell(t, "echo $HOME"))
	e.program = programs(e, t)
	var files strings.Builder
	files.WriteString("mkdir -p /tmp/dgsite/www && cd /tmp/dgsite && : > log")
	write := func(name, content string) {
		files.WriteString(" &&\necho " + base64.StdEncoding.EncodeToString([]byte(content)) + " | base64 -d > " + name)
	}
	write("server.py", siteServer)
	for name, content := range pages {
		write("www/"+name, content)
	}
	files.WriteString(" &&\n(python3 server.py > server.err 2>&1 &) && echo started")
	if out := e.shell(t, files.String()); !strings.HasSuffix(strings.TrimSpace(out), "started") {
		t.Fatalf("the local web server: %s", out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(e.shell(t, `python3 -c "import urllib.request;print(urllib.request.urlopen('`+site+`/first.html').status)" 2>&1`), "200") {
		if time.Now().After(deadline) {
			t.Fatalf("the local web server does not answer: %s", e.shell(t, "cat /tmp/dgsite/server.err"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return e
}

// programs are the programs of the suite's tasks the session has.
func programs(e *taskEnv, t testing.TB) map[string]bool {
	have := map[string]bool{}
	for _, prog := range strings.Fields(e.shell(t, "for p in chromium lxterminal mousepad thunar soffice; do command -v $p >/dev/null && echo $p; done")) {
		have[prog] = true
	}
	return have
}

// desktopImageBuilt tells whether scripts/setup built the default desktop
// image.
func desktopImageBuilt() bool {
	_, err := os.Stat(filepath.Join(imagebuild.DesktopLayout(), "index.json"))
	return err == nil
}

// run carries out one task with one provider's scripted model and checks
// its outcome.
func (e *taskEnv) run(t *testing.T, task suiteTask, provider string) (bool, string) {
	// A model looks at the screen until it sees the task done (the
	// confirmation page, the file saved) before it says so: on a loaded
	// machine an application may take a while to act on the input.
	// Each run is judged by what it did: the site's log starts empty, so a
	// run does not pass on what an earlier one sent.
	e.shell(t, "if [ -d /tmp/dgsite ]; then : > /tmp/dgsite/log; fi")
	moves := append(task.moves(e, t), look("the task done", func() bool { ok, _ := task.check(e, t); return ok }))
	m := newScriptedModel(t, provider, moves)
	defer func() {
		e.closeApps(t)
		if task.cleanup != "" {
			e.shell(t, task.cleanup+"; true")
		}
	}()
	body, _ := json.Marshal(map[string]any{
		"prompt": task.prompt, "provider": provider, "model": m.model(), "apiKey": "sk-task-suite", "baseUrl": m.baseURL(), "maxSteps": 400,
	})
	code, out, _ := e.p.do("POST", "/v1/sessions/"+e.id+"/runs", string(body))
	if code != http.StatusOK {
		t.Fatalf("create run: %d %s", code, out)
	}
	var run struct {
		ID          string `json:"id"`
		State       string `json:"state"`
		StateReason string `json:"stateReason"`
		Steps       int    `json:"steps"`
	}
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, out, _ := e.p.do("GET", "/v1/runs/"+run.ID, "")
		if err := json.Unmarshal(out, &run); err != nil {
			t.Fatal(err)
		}
		if run.State != "RUN_STATE_QUEUED" && run.State != "RUN_STATE_RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			return false, "the run is still " + run.State
		}
		time.Sleep(200 * time.Millisecond)
	}
	ok, desc := task.check(e, t)
	m.mu.Lock()
	stuck, turns := m.stuck, m.turns
	m.mu.Unlock()
	t.Logf("%s by %s: run %s (%s) in %d steps, %d model turns; outcome ok=%v", task.name, provider, run.State, run.StateReason, run.Steps, turns, ok)
	if stuck != "" {
		desc = "the model never saw " + stuck + "; " + desc
	}
	if !ok {
		desc += "\nwhat the model was told last: " + m.lastTold()
		if dir := os.Getenv("DESKGRID_TASKS_SHOTS"); dir != "" {
			// The screen as the task left it, to see what went wrong.
			if code, png, _ := e.p.do("GET", "/v1/sessions/"+e.id+"/screenshot", ""); code == http.StatusOK {
				_ = os.WriteFile(filepath.Join(dir, task.name+"-"+provider+".png"), png, 0o644)
			}
		}
	}
	if run.State != "RUN_STATE_SUCCEEDED" {
		desc = fmt.Sprintf("run %s: %s; %s", run.State, run.StateReason, desc)
	}
	return ok, desc
}

// closeApps ends what a task started, so the next starts from a clean
// screen, and removes the browser profiles it made, so fifty runs do not
// pile fifty of them up on the session's disk.
func (e *taskEnv) closeApps(t testing.TB) {
	e.shell(t, `pids=$(cat /tmp/dgapps.pid 2>/dev/null); rm -f /tmp/dgapps.pid
for pid in $pids; do kill $pid 2>/dev/null; done
for i in $(seq 100); do alive=; for pid in $pids; do kill -0 $pid 2>/dev/null && alive=1; done; [ -z "$alive" ] && break; sleep 0.1; done
rm -rf /tmp/dgb-*/; true`)
}

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	imagestore "github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
	"golang.org/x/sys/unix"
)

// The suite's office task: LibreOffice Calc on the desktop image with
// LibreOffice (deploy/images/desktop-office), on a session of its own.

// officeImage is the reference sessions of the office task name.
const officeImage = "deskgrid/desktop-office:latest"

// odsMaker writes a spreadsheet (OpenDocument, the least a valid one holds)
// with 12, 30 and 8 in A1:A3 and the cell cursor on A4, as a person would
// have left it, to the path it is given.
const odsMaker = `import sys, zipfile
ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
      'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:config="urn:oasis:names:tc:opendocument:xmlns:config:1.0" '
      'xmlns:ooo="http://openoffice.org/2004/office" office:version="1.2"')
rows = ''.join('<table:table-row><table:table-cell office:value-type="float" office:value="%d"><text:p>%d</text:p></table:table-cell></table:table-row>' % (v, v) for v in (12, 30, 8))
content = ('<?xml version="1.0" encoding="UTF-8"?><office:document-content %s><office:body><office:spreadsheet>'
           '<table:table table:name="Sheet1"><table:table-column/>%s</table:table></office:spreadsheet></office:body></office:document-content>') % (ns, rows)
item = lambda n, t, v: '<config:config-item config:name="%s" config:type="%s">%s</config:config-item>' % (n, t, v)
settings = ('<?xml version="1.0" encoding="UTF-8"?><office:document-settings %s><office:settings><config:config-item-set config:name="ooo:view-settings">'
            '<config:config-item-map-indexed config:name="Views"><config:config-item-map-entry>' + item('ViewId', 'string', 'view1') +
            '<config:config-item-map-named config:name="Tables"><config:config-item-map-entry config:name="Sheet1">' +
            item('CursorPositionX', 'int', '0') + item('CursorPositionY', 'int', '3') +
            '</config:config-item-map-entry></config:config-item-map-named>' + item('ActiveTable', 'string', 'Sheet1') +
            '</config:config-item-map-entry></config:config-item-map-indexed></config:config-item-set></office:settings></office:document-settings>') % ns
manifest = ('<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
            '<manifest:file-entry manifest:full-path="/" manifest:version="1.2" manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
            '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
            '<manifest:file-entry manifest:full-path="settings.xml" manifest:media-type="text/xml"/></manifest:manifest>')
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    z.writestr(zipfile.ZipInfo('mimetype'), 'application/vnd.oasis.opendocument.spreadsheet')
    z.writestr('META-INF/manifest.xml', manifest, zipfile.ZIP_DEFLATED)
    z.writestr('content.xml', content, zipfile.ZIP_DEFLATED)
    z.writestr('settings.xml', settings, zipfile.ZIP_DEFLATED)
`

// odsCell prints what a cell of a saved spreadsheet holds (its formula and
// its computed value, "|"-separated) from the file's content.xml: arguments
// the file, the row and the column (0-based).
const odsCell = `import sys, zipfile, xml.etree.ElementTree as ET
T = '{urn:oasis:names:tc:opendocument:xmlns:table:1.0}'
O = '{urn:oasis:names:tc:opendocument:xmlns:office:1.0}'
root = ET.fromstring(zipfile.ZipFile(sys.argv[1]).read('content.xml'))
want_r, want_c = int(sys.argv[2]), int(sys.argv[3])
r = 0
for row in root.iter(T + 'table-row'):
    n = int(row.get(T + 'number-rows-repeated', '1'))
    if r <= want_r < r + n:
        c = 0
        for cell in row:
            m = int(cell.get(T + 'number-columns-repeated', '1'))
            if c <= want_c < c + m:
                print('%s|%s' % (cell.get(T + 'formula', ''), cell.get(O + 'value', '')))
                sys.exit(0)
            c += m
        break
    r += n
print('|')
`

// py is a shell command running a Python program given as text.
func py(program string, args ...string) string {
	return "echo " + base64.StdEncoding.EncodeToString([]byte(program)) + " | base64 -d > /tmp/dgpy.$$ && python3 /tmp/dgpy.$$ " + strings.Join(args, " ") + "; rm -f /tmp/dgpy.$$"
}

// sheetCell is the middle of the A4 cell of the office task's sheet on a
// 1280x800 screen, Calc maximized (the image's LibreOffice settings): column
// A spans x 41-122, row 4 y 233-249.
var sheetCell = [2]int{80, 241}

var officeTask = suiteTask{
	name: "libreoffice-formula", needs: []string{"soffice"}, image: officeImage,
	prompt: "In the spreadsheet ~/work/sheet.ods, put the sum of A1:A3 into A4 as a formula and save it.",
	moves: func(e *taskEnv, t testing.TB) []move {
		// The sheet opens with the cell cursor on A4; Gemini types by
		// clicking where it types, on A4 itself. Calc may take the save
		// key before it is ready for it: the model saves until it sees the
		// file saved (saving a saved sheet does nothing).
		saved := look("the sheet saved", func() bool { ok, _ := sheetHasFormula(e, t); return ok })
		saved.press = []string{"ctrl+s"}
		return []move{
			bash("mkdir -p ~/work && rm -f ~/work/sheet.ods ~/work/.~lock.sheet.ods# && " + py(odsMaker, "$HOME/work/sheet.ods") +
				" && (soffice --calc --norestore ~/work/sheet.ods >/tmp/dglo.log 2>&1 & echo $! >> /tmp/dgapps.pid)"),
			look("the sheet in Calc", e.windowFocused(t, "sheet.ods")),
			// Keys sent while Calc still loads are lost: the model waits
			// until it has settled, as a person waits for the sheet to be
			// drawn.
			look("Calc settled", e.processIdle(t, "soffice.bin")),
			{kind: "type", x: sheetCell[0], y: sheetCell[1], text: "=SUM(A1:A3)", enter: true, keep: true},
			saved,
		}
	},
	check: sheetHasFormula,
	// LibreOffice's office process outlives the launcher the task started:
	// it goes too, so the next run opens the sheet afresh.
	cleanup: "pkill -x soffice.bin; for i in $(seq 100); do pgrep -x soffice.bin >/dev/null || break; sleep 0.1; done; rm -f ~/work/.~lock.sheet.ods#",
}

// sheetHasFormula tells whether the saved sheet's A4 holds the formula and
// its value.
func sheetHasFormula(e *taskEnv, t testing.TB) (bool, string) {
	got := strings.TrimSpace(e.shell(t, py(odsCell, "$HOME/work/sheet.ods", "3", "0")+" 2>&1"))
	const want = "of:=SUM([.A1:.A3])|50"
	return got == want, fmt.Sprintf("A4 of ~/work/sheet.ods: %q, want %q", got, want)
}

// on is the task environment of a session on image, started on first use
// on the same deskgrid as e.
func (e *taskEnv) on(t *testing.T, image string) *taskEnv {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o := e.others[image]; o != nil {
		return o
	}
	officeImages(t)
	body := fmt.Sprintf(`{"image":%q,"display":{"width":%d,"height":%d},"idleTimeout":"1800s"}`, image, taskScreenW, taskScreenH)
	code, out, _ := e.p.do("POST", "/v1/sessions", body)
	var s sessionJSON
	if err := json.Unmarshal(out, &s); code != http.StatusOK || err != nil || s.State != "SESSION_STATE_RUNNING" {
		t.Fatalf("create a session on %s: %d %s", image, code, out)
	}
	o := &taskEnv{p: e.p, id: s.ID, image: true}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ok, desc := panelShown(e.p.screenshot(o.id))
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no panel on the screen of the session on %s: %s", image, desc)
		}
		time.Sleep(500 * time.Millisecond)
	}
	o.home = strings.TrimSpace(o.shell(t, "echo $HOME"))
	o.program = programs(o, t)
	if e.others == nil {
		e.others = map[string]*taskEnv{}
	}
	e.others[image] = o
	return o
}

var officeStore struct {
	once sync.Once
	err  error
}

// officeImages puts the office image into the desktop tests' image store
// (desktopImages), building it first when scripts/setup has not: one layer
// with LibreOffice on the default desktop image, cached beside it.
func officeImages(t testing.TB) {
	t.Helper()
	dir := desktopImages(t)
	officeStore.once.Do(func() {
		var layout string
		layout, officeStore.err = buildOfficeImage(t)
		if officeStore.err != nil {
			return
		}
		ctx := context.Background()
		store, err := imagestore.New(ctx, imagestore.Deps{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			_, err = store.ImportPath(ctx, "", layout, imagestore.ImportOptions{Ref: officeImage})
		}
		if err == nil {
			err = store.SetPublic(ctx, "", officeImage, true)
		}
		officeStore.err = err
	})
	if officeStore.err != nil {
		t.Fatal(officeStore.err)
	}
}

// buildOfficeImage builds the office image into the image cache unless it
// is there for the recipe as it is, as scripts/setup --dev does, under the
// cache's lock, and returns its layout: the one of this recipe, not
// whichever the cache's desktop-office link names.
func buildOfficeImage(t testing.TB) (string, error) {
	recipe, err := imagebuild.Load("../../deploy/images/desktop-office")
	if err != nil {
		return "", err
	}
	hash, err := recipe.Hash()
	if err != nil {
		return "", err
	}
	layout := filepath.Join(imagebuild.DefaultCacheDir, "desktop-office-"+hash)
	if _, err := os.Stat(filepath.Join(layout, "index.json")); err == nil {
		return layout, nil
	}
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil || os.Geteuid() != 0 {
		return "", fmt.Errorf("the desktop image with LibreOffice is not built (run scripts/setup --dev, or deskgrid images build -cache %s deploy/images/desktop-office as root)", imagebuild.DefaultCacheDir)
	}
	t.Logf("building the desktop image with LibreOffice (deploy/images/desktop-office) into %s: LibreOffice installed on the default desktop image, a few minutes once", imagebuild.DefaultCacheDir)
	start := time.Now()
	lock, err := os.OpenFile(filepath.Join(imagebuild.DefaultCacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	var progress strings.Builder
	b, err := imagebuild.New(imagebuild.Deps{Mmdebstrap: bin, Sources: imagebuild.HostSources(), Progress: &progress})
	if err != nil {
		return "", err
	}
	built, _, err := b.Cached(context.Background(), recipe, imagebuild.DefaultCacheDir)
	if err != nil {
		return "", fmt.Errorf("build the office image: %w\n%s", err, progress.String())
	}
	t.Logf("built the desktop image with LibreOffice in %s", time.Since(start).Round(time.Second))
	return built, nil
}

// processIdle tells whether the session's process named name used at most
// one clock tick of CPU over half a second: it has done loading and waits
// for input.
func (e *taskEnv) processIdle(t testing.TB, name string) func() bool {
	cmd := `p=$(pgrep -x ` + name + ` | head -1); [ -n "$p" ] || { echo none; exit 0; }; ` +
		`a=$(awk '{print $14+$15}' /proc/$p/stat); sleep 0.5; b=$(awk '{print $14+$15}' /proc/$p/stat); echo $((b-a))`
	return func() bool {
		out := strings.TrimSpace(e.shell(t, cmd))
		return out == "0" || out == "1"
	}
}

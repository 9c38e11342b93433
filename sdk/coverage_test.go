package deskgrid_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Events has no service; linked so the walk can read every file.
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

var update = flag.Bool("update", false, "rewrite docs/sdks.md from sdk/coverage.json")

// coverageRow is one public RPC and the method that calls it in each SDK.
type coverageRow struct {
	RPC        string `json:"rpc"`
	Go         string `json:"go"`
	Python     string `json:"python"`
	TypeScript string `json:"typescript"`
}

// publicRPC is an RPC with a google.api.http rule: part of the REST API.
type publicRPC struct {
	name    string // deskgrid.session.v1.SessionService/CreateSession
	service string // deskgrid.session.v1.SessionService
	verb    string
	path    string
}

// publicRPCs walks the descriptors of every proto file under proto/deskgrid
// and returns the RPCs that have an HTTP rule, in file order. A file the SDK
// does not link (a new service package) fails the test: its RPCs could not
// be checked.
func publicRPCs(t *testing.T) []publicRPC {
	t.Helper()
	files, err := filepath.Glob("../proto/deskgrid/*/v*/*.proto")
	if err != nil || len(files) == 0 {
		t.Fatalf("no proto files under ../proto/deskgrid: %v", err)
	}
	sort.Strings(files)
	var out []publicRPC
	for _, f := range files {
		rel := strings.TrimPrefix(filepath.ToSlash(f), "../proto/")
		fd, err := protoregistry.GlobalFiles.FindFileByPath(rel)
		if err != nil {
			t.Errorf("%s is not linked into the Go SDK (import its generated package in the SDK): %v", rel, err)
			continue
		}
		svcs := fd.Services()
		for i := range svcs.Len() {
			sd := svcs.Get(i)
			ms := sd.Methods()
			for j := range ms.Len() {
				md := ms.Get(j)
				rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if rule == nil {
					continue // node-internal: no REST route
				}
				verb, path := httpRoute(rule)
				out = append(out, publicRPC{
					name: string(sd.FullName()) + "/" + string(md.Name()), service: string(sd.FullName()),
					verb: verb, path: path,
				})
			}
		}
	}
	return out
}

func httpRoute(r *annotations.HttpRule) (string, string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return "GET", p.Get
	case *annotations.HttpRule_Post:
		return "POST", p.Post
	case *annotations.HttpRule_Put:
		return "PUT", p.Put
	case *annotations.HttpRule_Delete:
		return "DELETE", p.Delete
	case *annotations.HttpRule_Patch:
		return "PATCH", p.Patch
	case *annotations.HttpRule_Custom:
		return p.Custom.GetKind(), p.Custom.GetPath()
	}
	return "", ""
}

func loadCoverage(t *testing.T) []coverageRow {
	t.Helper()
	b, err := os.ReadFile("coverage.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RPCs []coverageRow `json:"rpcs"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("coverage.json: %v", err)
	}
	return doc.RPCs
}

// goTypes are the SDK types coverage.json may name in its "go" column.
var goTypes = map[string]reflect.Type{
	"Client":   reflect.TypeOf(&deskgrid.Client{}),
	"Sessions": reflect.TypeOf(&deskgrid.Sessions{}),
	"Session":  reflect.TypeOf(&deskgrid.Session{}),
	"Files":    reflect.TypeOf(&deskgrid.Files{}),
	"Runs":     reflect.TypeOf(&deskgrid.Runs{}),
	"Images":   reflect.TypeOf(&deskgrid.Images{}),
	"Nodes":    reflect.TypeOf(&deskgrid.Nodes{}),
	"History":  reflect.TypeOf(&deskgrid.History{}),
}

var (
	pyClass  = regexp.MustCompile(`^class (\w+)\b`)
	pyMethod = regexp.MustCompile(`^    (?:async )?def (\w+)\(`)
	tsClass  = regexp.MustCompile(`^(?:export )?(?:abstract )?class (\w+)\b`)
	tsMethod = regexp.MustCompile(`^  (?:(?:public|protected|static|override) )*(?:async )?(?:\* ?)?(\w+)\s*(?:<[^()]*>)?\(`)
)

// classMethods reads the classes and their methods from source files: a
// class starts at a top-level class line, its methods are the lines the
// method pattern matches until the next top-level line.
func classMethods(t *testing.T, glob string, class, method *regexp.Regexp) map[string]map[string]bool {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no source files %s: %v", glob, err)
	}
	out := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur map[string]bool
		for _, line := range strings.Split(string(b), "\n") {
			if m := class.FindStringSubmatch(line); m != nil {
				cur = map[string]bool{}
				out[m[1]] = cur
				continue
			}
			if line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#' && line[0] != '/' && line[0] != '@' && line[0] != ')' {
				cur = nil // a top-level line other than a class ends the class
				continue
			}
			if m := method.FindStringSubmatch(line); m != nil && cur != nil {
				cur[m[1]] = true
			}
		}
	}
	return out
}

func splitMethod(s string) (string, string, bool) {
	typ, m, ok := strings.Cut(s, ".")
	return typ, m, ok && typ != "" && m != "" && !strings.Contains(m, ".")
}

// coverageProblems says what is wrong with the table rows against the
// public RPCs and the SDKs' methods (py and ts: class → methods).
func coverageProblems(rpcs []publicRPC, rows []coverageRow, py, ts map[string]map[string]bool) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	byName := map[string]coverageRow{}
	for _, r := range rows {
		if _, dup := byName[r.RPC]; dup {
			bad("coverage.json lists %s twice", r.RPC)
		}
		byName[r.RPC] = r
	}
	public := map[string]bool{}
	for _, r := range rpcs {
		public[r.name] = true
		row, ok := byName[r.name]
		if !ok {
			bad("%s (%s %s) is in the public API but not in sdk/coverage.json: add a method to each SDK and list it", r.name, r.verb, r.path)
			continue
		}
		for _, c := range []struct{ lang, m string }{{"Go", row.Go}, {"Python", row.Python}, {"TypeScript", row.TypeScript}} {
			if c.m == "" {
				bad("%s: no %s method", r.name, c.lang)
			}
		}
	}
	for _, r := range rows {
		if !public[r.RPC] {
			bad("coverage.json lists %s, which is not an RPC of the public API (renamed, removed, or without an HTTP rule)", r.RPC)
		}
		if r.Go != "" {
			typ, m, ok := splitMethod(r.Go)
			switch rt := goTypes[typ]; {
			case !ok:
				bad("%s: go %q is not Type.Method", r.RPC, r.Go)
			case rt == nil:
				bad("%s: go type %s is not one of the SDK's (add it to goTypes)", r.RPC, typ)
			default:
				if _, has := rt.MethodByName(m); !has {
					bad("%s: the Go SDK has no method %s.%s", r.RPC, typ, m)
				}
			}
		}
		if r.Python != "" {
			cls, m, ok := splitMethod(r.Python)
			if !ok || !py[cls][m] {
				bad("%s: the Python SDK has no method %s (class %s in sdk/python/deskgrid)", r.RPC, r.Python, cls)
			} else if twin, has := py["Async"+cls]; has && !twin[m] {
				bad("%s: the Python SDK's Async%s has no %s, the async twin of %s", r.RPC, cls, m, r.Python)
			}
		}
		if r.TypeScript != "" {
			cls, m, ok := splitMethod(r.TypeScript)
			if !ok || !ts[cls][m] {
				bad("%s: the TypeScript SDK has no method %s (class %s in sdk/typescript/src)", r.RPC, r.TypeScript, cls)
			}
		}
	}
	return out
}

// TestCoverageProblems feeds the checker a table with each kind of fault.
func TestCoverageProblems(t *testing.T) {
	rpcs := []publicRPC{
		{name: "x.v1.S/Covered", service: "x.v1.S", verb: "GET", path: "/v1/a"},
		{name: "x.v1.S/Missing", service: "x.v1.S", verb: "POST", path: "/v1/b"},
		{name: "x.v1.S/Partial", service: "x.v1.S", verb: "GET", path: "/v1/c"},
	}
	rows := []coverageRow{
		{RPC: "x.v1.S/Covered", Go: "Session.Screenshot", Python: "Session.screenshot", TypeScript: "Session.screenshot"},
		{RPC: "x.v1.S/Partial", Go: "Session.NoSuch", Python: "Session.diff", TypeScript: ""},
		{RPC: "x.v1.S/Gone", Go: "Nope.Screenshot", Python: "Session", TypeScript: "Session.nope"},
	}
	py := map[string]map[string]bool{"Session": {"screenshot": true, "diff": true}, "AsyncSession": {"screenshot": true}}
	ts := map[string]map[string]bool{"Session": {"screenshot": true}}
	got := strings.Join(coverageProblems(rpcs, rows, py, ts), "\n")
	for _, want := range []string{
		"x.v1.S/Missing (POST /v1/b) is in the public API but not in sdk/coverage.json",
		"x.v1.S/Partial: no TypeScript method",
		"x.v1.S/Partial: the Go SDK has no method Session.NoSuch",
		"x.v1.S/Partial: the Python SDK's AsyncSession has no diff",
		"coverage.json lists x.v1.S/Gone, which is not an RPC of the public API",
		"x.v1.S/Gone: go type Nope is not one of the SDK's",
		"x.v1.S/Gone: the Python SDK has no method Session ",
		"x.v1.S/Gone: the TypeScript SDK has no method Session.nope",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "x.v1.S/Covered") {
		t.Errorf("a covered RPC reported:\n%s", got)
	}
}

// TestCoverage fails when a public RPC (one with an HTTP rule) has no SDK
// method in Go, Python or TypeScript, when sdk/coverage.json names an RPC
// that does not exist or a method an SDK does not have, and when
// docs/sdks.md is not what coverage.json makes (go test -run Coverage
// -update rewrites it).
func TestCoverage(t *testing.T) {
	rpcs := publicRPCs(t)
	rows := loadCoverage(t)
	if len(rpcs) < 60 {
		t.Errorf("found only %d public RPCs: is the walk missing files?", len(rpcs))
	}
	py := classMethods(t, "python/deskgrid/*.py", pyClass, pyMethod)
	ts := classMethods(t, "typescript/src/*.ts", tsClass, tsMethod)
	for _, p := range coverageProblems(rpcs, rows, py, ts) {
		t.Error(p)
	}
	byName := map[string]coverageRow{}
	for _, r := range rows {
		byName[r.RPC] = r
	}

	doc := renderCoverage(rpcs, byName)
	const page = "../docs/sdks.md"
	if *update {
		if err := os.WriteFile(page, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(page)
	if err != nil || string(got) != doc {
		t.Errorf("docs/sdks.md is not what sdk/coverage.json makes (%v): run `go test ./sdk -run Coverage -update`", err)
	}
}

// TestCoverageParsers checks the source readers on small inputs, so a
// method the coverage test cannot see fails here rather than passing as
// covered.
func TestCoverageParsers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.py", "class A:\n    \"\"\"Doc.\"\"\"\n\n    def m(self) -> None:\n        def inner() -> None: ...\n\n    async def n(\n        self,\n    ) -> None: ...\n\n\ndef top() -> None: ...\n    def stray(self) -> None: ...\n")
	py := classMethods(t, filepath.Join(dir, "*.py"), pyClass, pyMethod)
	if !py["A"]["m"] || !py["A"]["n"] || py["A"]["inner"] || py["A"]["stray"] || len(py["A"]) != 2 {
		t.Fatalf("python: %v", py)
	}
	write("a.ts", "export class B implements X {\n  constructor(private readonly c: C) {}\n  get id(): string {\n    return '';\n  }\n  async m(a = 1): Promise<void> {\n    if (a) f(a);\n  }\n  async *it<T>(o: O = {}): AsyncGenerator<T> {}\n  plain(): void {}\n}\nfunction free(): void {}\n")
	ts := classMethods(t, filepath.Join(dir, "*.ts"), tsClass, tsMethod)
	for _, m := range []string{"m", "it", "plain"} {
		if !ts["B"][m] {
			t.Fatalf("typescript: no %s in %v", m, ts)
		}
	}
	if ts["B"]["id"] || ts["B"]["if"] || ts["B"]["free"] {
		t.Fatalf("typescript: %v", ts)
	}
}

// serviceOrder is the order of the page's sections; others follow.
var serviceOrder = []string{
	"deskgrid.session.v1.SessionService",
	"deskgrid.session.v1.NodeService",
	"deskgrid.display.v1.DisplayService",
	"deskgrid.sandbox.v1.SandboxService",
	"deskgrid.agent.v1.AgentService",
	"deskgrid.history.v1.HistoryService",
	"deskgrid.image.v1.ImageService",
}

var serviceTitles = map[string]string{
	"deskgrid.session.v1.SessionService": "Sessions",
	"deskgrid.session.v1.NodeService":    "Nodes",
	"deskgrid.display.v1.DisplayService": "Display",
	"deskgrid.sandbox.v1.SandboxService": "Sandbox",
	"deskgrid.agent.v1.AgentService":     "Agent runs and input leases",
	"deskgrid.history.v1.HistoryService": "History",
	"deskgrid.image.v1.ImageService":     "Images",
}

func renderCoverage(rpcs []publicRPC, rows map[string]coverageRow) string {
	rank := func(svc string) int {
		if i := slices.Index(serviceOrder, svc); i >= 0 {
			return i
		}
		return len(serviceOrder)
	}
	rpcs = slices.Clone(rpcs)
	sort.SliceStable(rpcs, func(i, j int) bool { return rank(rpcs[i].service) < rank(rpcs[j].service) })
	var b strings.Builder
	b.WriteString(`# What each SDK covers

<!-- Made from sdk/coverage.json by ` + "`go test ./sdk -run Coverage -update`" + `; do not edit. -->

Every RPC of the public API (each one with a REST route) has a method in each
SDK: Go (` + "`sdk`" + `, gRPC), Python (` + "`sdk/python`" + `, REST) and TypeScript
(` + "`sdk/typescript`" + `, REST). The table below says which. ` + "`go test ./sdk -run Coverage`" + `
walks the API's proto descriptors and fails when an RPC has no method in an
SDK, when a listed method does not exist, or when this page is stale. RPCs
without a REST route (node-internal ones such as CreateDisplay or
StartProcess) are not part of the public API and are not listed.

Where the methods live:

- Go: ` + "`client.Sessions`, `client.Nodes`, `client.Runs`, `client.Images`, `client.History`" + `;
  ` + "`Session`" + ` is what ` + "`Sessions.Create`/`Get`" + ` return and ` + "`Files`" + ` is ` + "`session.Files()`" + `.
- Python: ` + "`client.sessions`, `client.nodes`, `client.runs`, `client.images`, `client.history`" + `;
  ` + "`Files`" + ` is ` + "`session.files`" + `. ` + "`deskgrid.aio.AsyncClient`" + ` has each of these methods,
  awaited, on its ` + "`AsyncSessions`, `AsyncSession`, `AsyncRuns`, `AsyncImages`, `AsyncHistory`" + `
  and ` + "`AsyncNodes`" + ` (file calls as ` + "`AsyncSession.read_file`" + `, ` + "`write_file`" + ` and ` + "`list_files`" + `).
- TypeScript: ` + "`dg.sessions`, `dg.nodes`, `dg.runs`, `dg.images`, `dg.history`" + `;
  ` + "`Files`" + ` is ` + "`session.files`" + `.
`)
	cur := ""
	for _, r := range rpcs {
		if r.service != cur {
			cur = r.service
			title := serviceTitles[cur]
			if title == "" {
				title = cur
			}
			fmt.Fprintf(&b, "\n## %s (`%s`)\n\n", title, cur)
			b.WriteString("| RPC | REST | Go | Python | TypeScript |\n|---|---|---|---|---|\n")
		}
		row := rows[r.name]
		_, method, _ := strings.Cut(r.name, "/")
		cell := func(s string) string {
			if s == "" {
				return "—"
			}
			return "`" + s + "`"
		}
		fmt.Fprintf(&b, "| %s | `%s %s` | %s | %s | %s |\n", method, r.verb, r.path, cell(row.Go), cell(row.Python), cell(row.TypeScript))
	}
	return b.String()
}

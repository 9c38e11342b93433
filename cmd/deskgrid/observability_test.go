package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

var observabilityDir = filepath.Join("..", "..", "deploy", "observability")

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string            `yaml:"record"`
			Alert  string            `yaml:"alert"`
			Expr   string            `yaml:"expr"`
			For    string            `yaml:"for"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// promQLMetrics returns the metric names a PromQL expression reads: what
// is left once strings, label matchers, ranges and grouping clauses are
// taken out, among the names deskgrid and Prometheus export. Recording
// rule names (with a colon) come back as they are.
func promQLMetrics(expr string) []string {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"`),
		regexp.MustCompile(`\{[^}]*\}`),
		regexp.MustCompile(`\[[^\]]*\]`),
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
	} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, tok := range regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`).FindAllString(expr, -1) {
		if strings.Contains(tok, ":") || strings.HasPrefix(tok, "deskgrid_") || strings.HasPrefix(tok, "rpc_") || strings.HasPrefix(tok, "http_") || tok == "up" {
			out = append(out, tok)
		}
	}
	return out
}

// notFromUp are metrics `deskgrid up` never exports, which the dashboards
// may read all the same: the query latency of roles keeping their stores in
// PostgreSQL (sqlstore's tests read it), a node's heartbeat age, which
// only a node in a cluster has (TestCluster reads it), and the warm desktop
// pools, which need a default image (TestDesktopWarmPool reads them), and
// the Redis client's calls and connections, which only roles started with
// -redis-url make (TestCluster reads them).
var notFromUp = map[string]bool{"deskgrid_postgres_query_duration_seconds": true, "deskgrid_node_heartbeat_age_seconds": true,
	"deskgrid_warm_desktops": true, "deskgrid_warm_desktop_claims_total": true,
	"deskgrid_redis_call_duration_seconds": true, "deskgrid_redis_dials_total": true}

// family is the metric family a series name belongs to.
func family(name string, have scrape) string {
	if have[name] != nil {
		return name
	}
	for _, suf := range []string{"_bucket", "_count", "_sum"} {
		if b, ok := strings.CutSuffix(name, suf); ok && have[b] != nil {
			return b
		}
	}
	return ""
}

// checkObservability reads deploy/observability: the rules parse, each
// alert has an expression, a severity and a summary, the dashboards parse,
// and every metric a rule or panel reads is one deskgrid exported in have
// (or a recording rule the rules define, or Prometheus's own up).
func checkObservability(t *testing.T, have scrape) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(observabilityDir, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	recorded := map[string]bool{}
	exprs := map[string]string{} // expression -> where it is
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := "rules.yml " + g.Name + " " + r.Record + r.Alert
			if r.Expr == "" || (r.Record == "") == (r.Alert == "") {
				t.Errorf("%s: want an expr and one of record or alert", where)
			}
			if r.Record != "" {
				recorded[r.Record] = true
			}
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" {
					t.Errorf("%s: no severity", where)
				}
			}
			exprs[r.Expr] = where
		}
	}
	if alerts < 8 {
		t.Errorf("rules.yml has %d alerts", alerts)
	}
	// Every alert is explained to the operator.
	ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !strings.Contains(string(ops), "`"+r.Alert+"`") {
				t.Errorf("alert %s is not explained in docs/operations.md", r.Alert)
			}
		}
	}

	dashboards, _ := filepath.Glob(filepath.Join(observabilityDir, "grafana", "*.json"))
	if len(dashboards) < 2 {
		t.Fatalf("dashboards: %v", dashboards)
	}
	for _, f := range dashboards {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string `json:"uid"`
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Query any `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
			t.Errorf("%s: no uid, title or panels", f)
		}
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, tg := range p.Targets {
				exprs[tg.Expr] = filepath.Base(f) + " panel " + p.Title
			}
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(string); ok {
				if m := regexp.MustCompile(`label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindStringSubmatch(q); m != nil {
					exprs[m[1]] = filepath.Base(f) + " variable"
				}
			}
		}
	}

	for expr, where := range exprs {
		names := promQLMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
		for _, n := range names {
			switch {
			case n == "up":
			case strings.Contains(n, ":"):
				if !recorded[n] {
					t.Errorf("%s: %s is no recording rule of rules.yml", where, n)
				}
			case family(n, have) == "":
				if b := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum"); notFromUp[b] {
					// Another test reads it (see notFromUp).
					break
				}
				t.Errorf("%s: %s is not a metric deskgrid exports", where, n)
			}
		}
	}
}

// The expression reader finds the metrics and only them.
func TestPromQLMetrics(t *testing.T) {
	got := promQLMetrics(`histogram_quantile(0.99, sum by (le, node) (rate(deskgrid_a_bucket{outcome!~"ok|x"}[5m]))) / on (node) deskgrid:b > 0 and up{job="deskgrid"}`)
	want := []string{"deskgrid_a_bucket", "deskgrid:b", "up"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

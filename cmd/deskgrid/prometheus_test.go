package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

// The rules and dashboards of deploy/observability read by the real
// Prometheus (Debian's prometheus package, which scripts/setup --dev
// installs): promtool checks the rules and runs their unit tests, and a
// Prometheus server scrapes a running `deskgrid up` and answers every
// dashboard query.

func lookPrometheus(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (Debian's prometheus package; scripts/setup --dev installs it): %v", name, err)
	}
	return p
}

// TestPromtoolRules: rules.yml passes `promtool check rules`, and
// rules_test.yml passes `promtool test rules` with, for every alert, a case
// where it fires and one where it stays quiet.
func TestPromtoolRules(t *testing.T) {
	promtool := lookPrometheus(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"test", "rules", "rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = observabilityDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	b, err := os.ReadFile(filepath.Join(observabilityDir, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(observabilityDir, "rules_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, c := range tf.Tests {
		for _, a := range c.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && (!fires[r.Alert] || !quiet[r.Alert]) {
				t.Errorf("alert %s: rules_test.yml has a case where it fires: %v, where it stays quiet: %v", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// promServer is a Prometheus server of the test's own.
type promServer struct {
	t    *testing.T
	base string
	logs *syncBuffer
}

// startPrometheus runs prometheus with config (YAML) in a directory of its
// own, and waits until it is ready.
func startPrometheus(t *testing.T, config string) *promServer {
	t.Helper()
	bin := lookPrometheus(t, "prometheus")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &promServer{t: t, base: "http://" + addr, logs: &syncBuffer{}}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-done:
			t.Fatalf("prometheus exited: %v\n%s", err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready\n%s", p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() float64 {
	v, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// api GETs an API path and returns its data, or the error Prometheus gave.
func (p *promServer) api(path string, q url.Values, data any) error {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+path+"?"+q.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		p.t.Fatalf("prometheus %s: %s: %v", path, resp.Status, err)
	}
	if out.Status != "success" {
		return &promError{out.Error}
	}
	return json.Unmarshal(out.Data, data)
}

type promError struct{ msg string }

func (e *promError) Error() string { return e.msg }

// query evaluates an instant PromQL query.
func (p *promServer) query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, nil // a scalar: no series
	}
	var out []promSample
	err := json.Unmarshal(data.Result, &out)
	return out, err
}

// dashboardQueries returns every panel query of the Grafana dashboards,
// with the dashboard variables filled in.
func dashboardQueries(t *testing.T, vars map[string]string) map[string]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(observabilityDir, "grafana", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards")
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr := tg.Expr
				for k, v := range vars {
					expr = strings.ReplaceAll(expr, "$"+k, v)
				}
				out[expr] = filepath.Base(f) + " panel " + p.Title
			}
		}
	}
	return out
}

// TestPrometheusScrapesUp: the real Prometheus server scrapes a running
// `deskgrid up` with the rules of deploy/observability loaded, and answers
// every dashboard query; each series a dashboard or rule reads that
// deskgrid exports is one Prometheus stored under that name.
func TestPrometheusScrapesUp(t *testing.T) {
	lookPrometheus(t, "prometheus")
	up := startUp(t, t.TempDir(), t.TempDir())
	s := up.createSession(320, 240)
	up.screenshot(s.ID)
	target := strings.TrimPrefix(up.httpURL, "http://")
	rules, err := filepath.Abs(filepath.Join(observabilityDir, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, `global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 2s
rule_files: [`+strconv.Quote(rules)+`]
scrape_configs:
  - job_name: deskgrid-up
    static_configs:
      - targets: [`+strconv.Quote(target)+`]
`)

	// Scraped, with the session's create and the node's figures, and the
	// recording rules evaluated on them.
	want := map[string]func([]promSample) bool{
		`up{job="deskgrid-up"}`: func(r []promSample) bool { return len(r) == 1 && r[0].value() == 1 },
		`deskgrid_node_capacity{node="local", resource="sessions"}`: func(r []promSample) bool {
			return len(r) == 1 && r[0].value() == 64
		},
		`deskgrid_session_create_duration_seconds_count{outcome="ok"}`: func(r []promSample) bool {
			return len(r) > 0 && r[0].value() >= 1
		},
		`deskgrid:node_session_utilisation{node="local"}`: func(r []promSample) bool {
			return len(r) == 1 && r[0].value() == 1.0/64
		},
		// History's ingest has caught up with the create's events.
		`deskgrid_events_consumer_pending{consumer="history"}`: func(r []promSample) bool {
			return len(r) == 1 && r[0].value() == 0
		},
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(want) > 0 {
		for q, ok := range want {
			r, err := prom.query(q)
			if err != nil {
				t.Fatalf("query %s: %v", q, err)
			}
			if ok(r) {
				delete(want, q)
			} else if time.Now().After(deadline) {
				var targets any
				_ = prom.api("/api/v1/targets", nil, &targets)
				t.Fatalf("query %s: %v\ntargets: %v\n%s", q, r, targets, prom.logs)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}

	var names []string
	if err := prom.api("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatal(err)
	}
	// The series the dashboards' headline panels stand on.
	for _, n := range []string{"deskgrid_sessions", "deskgrid_node_up", "deskgrid_node_capacity", "deskgrid_node_used",
		"deskgrid_session_create_duration_seconds_bucket", "deskgrid_session_create_phase_duration_seconds_bucket",
		"deskgrid_session_transitions_total", "deskgrid_display_screenshot_duration_seconds_bucket",
		"deskgrid_display_create_duration_seconds_bucket", "deskgrid_sandbox_create_duration_seconds_bucket",
		"deskgrid_rate_limited_total", "deskgrid_image_pulls_total", "deskgrid_events_publish_failures_total",
		"deskgrid_node_reconcile_removed_total", "deskgrid_events_consumer_pending", "deskgrid_events_consumer_ack_pending",
		"deskgrid_history_blob_bytes", "deskgrid_history_blob_files",
		"rpc_server_call_duration_seconds_bucket"} {
		if !slices.Contains(names, n) {
			t.Errorf("Prometheus has no %s", n)
		}
	}
	direct := up.scrape()
	exprs := dashboardQueries(t, map[string]string{"node": "local", "instance": target})
	b, _ := os.ReadFile(rules)
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			exprs[r.Expr] = "rules.yml " + r.Record + r.Alert
		}
	}
	for expr, where := range exprs {
		if _, err := prom.query(expr); err != nil {
			t.Errorf("%s: Prometheus refuses %q: %v", where, expr, err)
		}
		for _, n := range promQLMetrics(expr) {
			if family(n, direct) != "" && !slices.Contains(names, n) {
				t.Errorf("%s reads %s, which deskgrid exports but Prometheus did not store under that name", where, n)
			}
		}
	}
	t.Logf("Prometheus stored %d series names from deskgrid up; %d dashboard and rule queries answered", len(names), len(exprs))
}

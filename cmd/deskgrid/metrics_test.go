package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// scrape is one read of a /metrics endpoint.
type scrape map[string]*dto.MetricFamily

func scrapeURL(t testing.TB, url string) scrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

func (p *upProcess) scrape() scrape { return scrapeURL(p.t, p.httpURL+"/metrics") }

// value sums the series of name whose labels include want: counters and
// gauges by value, histograms by their count of observations.
func (s scrape) value(name string, want map[string]string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	var sum float64
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue series
			}
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// labelValues lists the values label takes among name's series.
func (s scrape) labelValues(name, label string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

type labels = map[string]string

// TestMetricsOfASessionsLife drives one session through create, screenshot,
// actions, exec and delete on a real `deskgrid up` and reads, on its
// /metrics, that each step moved the metric an operator watches, with the
// labels docs/operations.md names.
func TestMetricsOfASessionsLife(t *testing.T) {
	model := fakeAnthropic(t)
	p := startUp(t, t.TempDir(), t.TempDir(), "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL, "-metrics-tenant-usage")
	before := p.scrape()

	// A create refused before anything is made is counted with its code.
	if code, body, _ := p.do("POST", "/v1/sessions", `{"display":{"width":99999,"height":10}}`); code != http.StatusBadRequest {
		t.Fatalf("bad create: %d %s", code, body)
	}
	s := p.createSession(640, 480)
	p.screenshot(s.ID)
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/actions", `{"actions":[{"mouseMove":{"to":{"x":10,"y":10}}}],"screenshot":true}`); code != http.StatusOK {
		t.Fatalf("actions: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["true"]}`); code != http.StatusOK {
		t.Fatalf("exec: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["sh","-c","exit 3"]}`); code != http.StatusOK {
		t.Fatalf("exec: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/shell:run", `{"command":"echo hi"}`); code != http.StatusOK {
		t.Fatalf("shell: %d %s", code, body)
	}
	// An agent run against a provider speaking Anthropic's wire format: its
	// state changes and tokens are counted from the event stream.
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/runs", `{"prompt":"say done","provider":"anthropic"}`); code != http.StatusOK {
		t.Fatalf("run: %d %s", code, body)
	}
	var running scrape
	deadline := time.Now().Add(30 * time.Second)
	for {
		running = p.scrape()
		if running.value("deskgrid_agent_run_transitions_total", labels{"state": "succeeded", "provider": "anthropic"}) >= 1 &&
			running.value("deskgrid_agent_tokens_total", labels{"provider": "anthropic", "kind": "input"}) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a run: runs %v, tokens %v\n%s", running.labelValues("deskgrid_agent_run_transitions_total", "state"),
				running.value("deskgrid_agent_tokens_total", nil), p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The run is over: the input lease is free at once.
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/inputLease:acquire", `{"holder":"metrics-test"}`); code != http.StatusOK {
		t.Fatalf("acquire lease: %d %s", code, body)
	}
	running = p.scrape()

	moved := func(name string, l labels, by float64) {
		t.Helper()
		if d := running.value(name, l) - before.value(name, l); d < by {
			t.Errorf("%s%v moved by %v, want at least %v", name, l, d, by)
		}
	}
	moved("deskgrid_session_create_duration_seconds", labels{"outcome": "ok"}, 1)
	moved("deskgrid_session_create_duration_seconds", labels{"outcome": "invalid_argument"}, 1)
	for _, phase := range []string{"sandbox", "display", "first_screenshot"} {
		moved("deskgrid_session_create_phase_duration_seconds", labels{"phase": phase, "outcome": "ok"}, 1)
	}
	// The node told the create whether its display came warm.
	if running.value("deskgrid_session_create_duration_seconds", labels{"outcome": "ok", "warm": "unknown"}) != 0 {
		t.Errorf("create recorded without the node's warm note: %v", running.labelValues("deskgrid_session_create_duration_seconds", "warm"))
	}
	moved("deskgrid_display_create_duration_seconds", labels{"outcome": "ok"}, 1)
	moved("deskgrid_sandbox_create_duration_seconds", labels{"outcome": "ok"}, 1)
	moved("deskgrid_display_screenshot_duration_seconds", labels{"format": "png", "outcome": "ok"}, 2) // create's first and ours
	moved("deskgrid_display_screenshot_bytes_total", nil, 100)
	moved("deskgrid_display_actions_duration_seconds", labels{"outcome": "ok"}, 1)
	moved("deskgrid_sandbox_exec_duration_seconds", labels{"kind": "exec", "outcome": "ok"}, 1)
	moved("deskgrid_sandbox_exec_duration_seconds", labels{"kind": "exec", "outcome": "nonzero"}, 1)
	moved("deskgrid_sandbox_exec_duration_seconds", labels{"kind": "shell", "outcome": "ok"}, 1)
	if v := running.value("deskgrid_sessions", labels{"node": "local", "state": "running"}); v != 1 {
		t.Errorf("deskgrid_sessions{node=local,state=running} = %v, want 1", v)
	}
	if v := running.value("deskgrid_node_capacity", labels{"node": "local", "resource": "sessions"}); v != 64 {
		t.Errorf("deskgrid_node_capacity{resource=sessions} = %v, want 64", v)
	}
	if v := running.value("deskgrid_node_used", labels{"node": "local", "resource": "sessions"}); v != 1 {
		t.Errorf("deskgrid_node_used{resource=sessions} = %v, want 1", v)
	}
	moved("deskgrid_session_transitions_total", labels{"state": "running", "reason": "none"}, 1)
	// One placement, on the machine's own node; the bad create never got
	// that far.
	if d := running.value("deskgrid_placement_decisions_total", nil) - before.value("deskgrid_placement_decisions_total", nil); d != 1 ||
		running.value("deskgrid_placement_decisions_total", labels{"outcome": "placed"})-before.value("deskgrid_placement_decisions_total", labels{"outcome": "placed"}) != 1 {
		t.Errorf("placements moved by %v, by outcome %v; want one placed", d, running.labelValues("deskgrid_placement_decisions_total", "outcome"))
	}
	moved("deskgrid_agent_tokens_total", labels{"provider": "anthropic", "kind": "output"}, 1)
	moved("deskgrid_agent_lease_wait_duration_seconds", labels{"outcome": "ok"}, 1)
	// Each model call of the run, measured at the agent.
	moved("deskgrid_agent_provider_call_duration_seconds", labels{"provider": "anthropic", "outcome": "ok"}, 1)
	moved("deskgrid_agent_provider_tokens_total", labels{"provider": "anthropic", "direction": "input"}, 10)
	moved("deskgrid_agent_provider_tokens_total", labels{"provider": "anthropic", "direction": "output"}, 1)
	// Per-tenant usage, asked for with -metrics-tenant-usage.
	if tenants := running.labelValues("deskgrid_tenant_sessions", "tenant"); len(tenants) != 1 || tenants[0] == "" ||
		running.value("deskgrid_tenant_sessions", labels{"tenant": tenants[0], "state": "running"}) != 1 ||
		running.value("deskgrid_tenant_tokens_total", labels{"tenant": tenants[0], "provider": "anthropic", "kind": "input"}) < 10 {
		t.Errorf("per-tenant usage: tenants %v, sessions %v, tokens %v", tenants, running.value("deskgrid_tenant_sessions", nil), running.value("deskgrid_tenant_tokens_total", nil))
	}
	// Counters an alert reads exist from the start, at zero.
	for _, name := range []string{"deskgrid_rate_limited_total", "deskgrid_image_pulls_total", "deskgrid_events_publish_failures_total", "deskgrid_node_reconcile_removed_total",
		"deskgrid_sandbox_oom_kills_total", "deskgrid_sandbox_pids_limit_hits_total", "deskgrid_sandbox_disk_full_total",
		"deskgrid_placement_decisions_total", "deskgrid_placement_retries_total", "deskgrid_session_suspends_total", "deskgrid_session_resumes_total",
		"deskgrid_history_ingested_events_total", "deskgrid_history_ingest_store_failures_total", "deskgrid_nats_connection_events_total",
		"deskgrid_image_store_images", "deskgrid_image_store_filesystem_bytes"} {
		if before[name] == nil {
			t.Errorf("%s not exported before anything happened", name)
		}
	}
	// No series is labelled by a session.
	for name, f := range running {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), s.ID) {
					t.Errorf("%s has a label %s=%s naming the session", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	if code, body, _ := p.do("DELETE", "/v1/sessions/"+s.ID, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		after := p.scrape()
		stopped := after.value("deskgrid_session_transitions_total", labels{"state": "stopped", "reason": "deleted"})
		live := after.value("deskgrid_sessions", nil)
		// History stored the session's and the run's events.
		stored := after.value("deskgrid_history_ingested_events_total", labels{"outcome": "stored"}) - before.value("deskgrid_history_ingested_events_total", labels{"outcome": "stored"})
		if stopped >= 1 && live == 0 && after.value("deskgrid_node_used", labels{"resource": "sessions"}) == 0 && stored >= 3 {
			// The dashboards and alerts read only what was exported.
			for name, f := range running {
				if after[name] == nil {
					after[name] = f
				}
			}
			checkObservability(t, after)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after delete: transitions to stopped %v, live sessions %v, events history stored %v", stopped, live, stored)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A role other than the gateway serves its metrics on -metrics-addr.
func TestServeRoleMetricsAddr(t *testing.T) {
	re := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	p := &deskgridtest.Process{Name: "serve sandbox", Args: []string{"serve", "sandbox", "-grpc-addr", freeAddr(t), "-metrics-addr", "127.0.0.1:0",
		"-data-dir", t.TempDir(), "-runtime-dir", t.TempDir()}}
	p.Ready = func() bool { return re.MatchString(p.Logs()) }
	deskgridtest.StartProcess(t, p)
	// The metrics endpoint is served from the start; the sandbox service's
	// own series appear once it is set up.
	url := re.FindStringSubmatch(p.Logs())[1]
	want := []string{"deskgrid_image_pulls_total", "deskgrid_node_reconcile_removed_total", "deskgrid_sandbox_oom_kills_total", "go_goroutines"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := scrapeURL(t, url)
		var missing []string
		for _, name := range want {
			if got[name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve sandbox's /metrics has no %v\n%s", missing, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

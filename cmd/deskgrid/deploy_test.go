package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// The compose file is what `docker compose config` accepts once its secrets
// are given, and refuses without them; every deskgrid role runs with
// authentication and the shared secrets, and both session replicas answer
// to the one name the gateway and agent call.
func TestDockerComposeConfigValid(t *testing.T) {
	file := filepath.Join("..", "..", "docker-compose.yml")
	compose := func(env ...string) ([]byte, error) {
		cmd := exec.Command("docker-compose", "-f", file, "config")
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return stderr.Bytes(), err
		}
		return stdout.Bytes(), nil
	}
	if out, err := compose("DESKGRID_INTERNAL_TOKEN=", "DESKGRID_VIEWER_KEYS=", "DESKGRID_SECRET_KEY="); err == nil || !strings.Contains(string(out), "DESKGRID_INTERNAL_TOKEN") {
		t.Fatalf("docker-compose config without the secrets: %v\n%s", err, out)
	}
	secrets := map[string]string{"DESKGRID_INTERNAL_TOKEN": "tok-" + randomHex(8), "DESKGRID_VIEWER_KEYS": "v1:" + randomHex(16), "DESKGRID_SECRET_KEY": randomHex(16)}
	var env []string
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	out, err := compose(env...)
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var cfg struct {
		Services map[string]struct {
			Image       string
			Command     []string
			Environment map[string]string
			Networks    map[string]struct{ Aliases []string }
			Volumes     []string
		}
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	roles := map[string]int{}
	for name, svc := range cfg.Services {
		if !strings.HasPrefix(svc.Image, "deskgrid/") {
			continue
		}
		if len(svc.Command) < 2 || svc.Command[0] != "serve" {
			t.Fatalf("%s: command %v", name, svc.Command)
		}
		roles[svc.Command[1]]++
		if svc.Environment["DESKGRID_AUTH"] != "true" {
			t.Errorf("%s runs without DESKGRID_AUTH=true", name)
		}
		for k, v := range secrets {
			if svc.Environment[k] != v {
				t.Errorf("%s: %s is %q, want the one given", name, k, svc.Environment[k])
			}
		}
		if dir := cmp.Or(svc.Environment["DESKGRID_DATA_DIR"], "/tmp/deskgrid"); svc.Command[1] == "history" && !onVolume(dir, svc.Volumes) {
			t.Errorf("%s keeps its blobs (screenshots, recordings) in %s, not on a volume: they go with the container", name, dir)
		}
		if svc.Command[1] == "session" && !slices.Contains(svc.Networks["default"].Aliases, "session") {
			t.Errorf("%s does not answer to the name session", name)
		}
		if r := svc.Command[1]; (r == "gateway" || r == "agent") && svc.Environment["DESKGRID_SESSION_ADDR"] != "session:9090" {
			t.Errorf("%s calls the session service at %q, want session:9090 (every replica)", name, svc.Environment["DESKGRID_SESSION_ADDR"])
		}
	}
	if roles["session"] < 2 || roles["node"] < 2 || roles["gateway"] < 1 || roles["agent"] < 1 || roles["history"] < 1 {
		t.Fatalf("roles %v", roles)
	}
}

// A serve role without -auth listens only on loopback, unless -insecure.
func TestServeRefusesExposureWithoutAuth(t *testing.T) {
	for _, tc := range []struct {
		role, grpcAddr, httpAddr string
		auth, insecure, ok       bool
	}{
		{"session", "127.0.0.1:9090", "", false, false, true},
		{"session", "localhost:9090", "", false, false, true},
		{"node", "[::1]:9090", "", false, false, true},
		{"session", "0.0.0.0:9090", "", false, false, false},
		{"node", ":9090", "", false, false, false},
		{"agent", "10.1.2.3:9090", "", false, false, false},
		{"gateway", "127.0.0.1:9090", "0.0.0.0:8080", false, false, false},
		{"gateway", "0.0.0.0:9090", "127.0.0.1:8080", false, false, true},
		{"session", "0.0.0.0:9090", "", true, false, true},
		{"session", "0.0.0.0:9090", "", false, true, true},
	} {
		err := checkExposure(tc.role, &serverConfig{GRPCAddr: tc.grpcAddr, HTTPAddr: tc.httpAddr, Auth: tc.auth, Insecure: tc.insecure})
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc, err)
		}
		if err != nil && !strings.Contains(err.Error(), "-insecure") {
			t.Errorf("%+v: the refusal does not name the way out: %v", tc, err)
		}
	}
	// Through the command line: refused before anything starts.
	var out bytes.Buffer
	err := runServe(context.Background(), []string{"session", "-grpc-addr", "0.0.0.0:0"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "-auth is off") {
		t.Fatalf("serve session on 0.0.0.0 without -auth: %v", err)
	}
}

// Every Kubernetes manifest parses, names its kind, and the workloads probe
// their health service.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]int{}
	var history map[string]any
	var historyFile string
	shared := map[string]bool{} // claims that several pods may mount at once
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			kind, _ := doc["kind"].(string)
			if kind == "" || doc["apiVersion"] == nil {
				t.Fatalf("%s: a document without kind or apiVersion", f)
			}
			kinds[kind]++
			if kind == "ConfigMap" {
				data, _ := doc["data"].(map[string]any)
				if data["DESKGRID_AUTH"] != "true" {
					t.Fatalf("%s: the ConfigMap does not set DESKGRID_AUTH=true", f)
				}
			}
			if kind == "Service" {
				name, _ := doc["metadata"].(map[string]any)["name"].(string)
				spec, _ := doc["spec"].(map[string]any)
				if (name == "session" || name == "agent" || name == "history") && spec["clusterIP"] != "None" {
					t.Fatalf("%s: Service %s is not headless: callers would reach one replica per connection", f, name)
				}
			}
			if kind == "Deployment" && doc["metadata"].(map[string]any)["name"] == "history" {
				history, historyFile = doc, f
			}
			if kind == "PersistentVolumeClaim" {
				name, _ := doc["metadata"].(map[string]any)["name"].(string)
				modes, _ := doc["spec"].(map[string]any)["accessModes"].([]any)
				for _, m := range modes {
					shared[name] = shared[name] || m == "ReadWriteMany"
				}
			}
			if kind == "Deployment" || kind == "DaemonSet" {
				s := string(mustMarshal(t, doc))
				// Every role gets the settings, the shared secrets and the
				// key store.
				refs := envFromRefs(doc)
				for _, want := range []string{"configMapRef/deskgrid", "secretRef/deskgrid-secrets", "secretRef/deskgrid-postgres"} {
					if !refs[want] {
						t.Fatalf("%s: a %s without %s (has %v)", f, kind, want, refs)
					}
				}
				if !strings.Contains(s, "readinessProbe") || !strings.Contains(s, "livenessProbe") {
					t.Fatalf("%s: %s without probes", f, kind)
				}
				if kind == "DaemonSet" && !strings.Contains(s, "privileged: true") {
					t.Fatalf("%s: node DaemonSet is not privileged", f)
				}
			}
		}
	}
	if kinds["Deployment"] < 4 || kinds["DaemonSet"] != 1 || kinds["StatefulSet"] != 2 {
		t.Fatalf("kinds %v", kinds)
	}
	if history == nil {
		t.Fatal("no history Deployment")
	}
	historyKept(t, historyFile, history, shared)
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envFromRefs lists what a workload's containers take their environment
// from, as "configMapRef/<name>" and "secretRef/<name>".
func envFromRefs(doc map[string]any) map[string]bool {
	out := map[string]bool{}
	get := func(m any, k string) any {
		mm, _ := m.(map[string]any)
		return mm[k]
	}
	containers, _ := get(get(get(get(doc, "spec"), "template"), "spec"), "containers").([]any)
	for _, c := range containers {
		from, _ := get(c, "envFrom").([]any)
		for _, e := range from {
			for _, kind := range []string{"configMapRef", "secretRef"} {
				if name, ok := get(get(e, kind), "name").(string); ok {
					out[kind+"/"+name] = true
				}
			}
		}
	}
	return out
}

// onVolume reports whether dir lies on one of the named volumes (compose's
// short syntax, "name:/target[:mode]").
func onVolume(dir string, volumes []string) bool {
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/") {
			continue // a bind mount of a file or directory of the host
		}
		if target := strings.TrimSuffix(parts[1], "/"); dir != "" && (dir == target || strings.HasPrefix(dir, target+"/")) {
			return true
		}
	}
	return false
}

// historyKept checks the history Deployment: its blob store (screenshots,
// recordings' videos, under its data dir) is a directory, so it must be on
// a persistent volume (an emptyDir goes with the pod), and replicas, which
// each serve blobs from their own directory, must not be more than one
// unless that volume is shared (a claim in shared: ReadWriteMany).
func historyKept(t *testing.T, file string, doc map[string]any, shared map[string]bool) {
	t.Helper()
	get := func(m any, k string) any {
		mm, _ := m.(map[string]any)
		return mm[k]
	}
	spec := get(doc, "spec")
	pod := get(get(spec, "template"), "spec")
	containers, _ := get(pod, "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("%s: history has %d containers", file, len(containers))
	}
	dataDir := "/tmp/deskgrid" // the control-plane image's DESKGRID_DATA_DIR
	env, _ := get(containers[0], "env").([]any)
	for _, e := range env {
		if get(e, "name") == "DESKGRID_DATA_DIR" {
			dataDir, _ = get(e, "value").(string)
		}
	}
	claims := map[string]string{} // volume name → claim name
	vols, _ := get(pod, "volumes").([]any)
	for _, v := range vols {
		if c, ok := get(get(v, "persistentVolumeClaim"), "claimName").(string); ok && c != "" {
			claims[get(v, "name").(string)] = c
		}
	}
	claim := ""
	mounts, _ := get(containers[0], "volumeMounts").([]any)
	for _, m := range mounts {
		mp, _ := get(m, "mountPath").(string)
		name, _ := get(m, "name").(string)
		if claims[name] != "" && (dataDir == mp || strings.HasPrefix(dataDir, strings.TrimSuffix(mp, "/")+"/")) {
			claim = claims[name]
		}
	}
	if claim == "" {
		t.Errorf("%s: history keeps its blobs in %s, not on a persistent volume claim: they go with the pod", file, dataDir)
	}
	if n, _ := get(spec, "replicas").(int); n > 1 && !shared[claim] {
		t.Errorf("%s: %d history replicas, each with a blob directory of its own: a screenshot one stored is not found through another", file, n)
	}
}

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// The compose file is what `docker compose config` accepts.
func TestDockerComposeConfigValid(t *testing.T) {
	out, err := exec.Command("docker-compose", "-f", filepath.Join("..", "..", "docker-compose.yml"), "config", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
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
			if kind == "Deployment" || kind == "DaemonSet" {
				s := string(mustMarshal(t, doc))
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
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

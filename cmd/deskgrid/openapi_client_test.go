package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A client generated from the OpenAPI document of a real deskgrid up
// (openapi-typescript and openapi-fetch from npm, as a user would) calls the
// main routes, parsing each reply as the document declares.
func TestGeneratedOpenAPIClient(t *testing.T) {
	const script = "../../gateway/e2e/client.spec.mjs"
	for _, m := range []string{"openapi-typescript", "openapi-fetch", "swagger2openapi"} {
		if _, err := os.Stat("../../gateway/e2e/node_modules/" + m + "/package.json"); err != nil {
			t.Fatalf("%s missing: run scripts/setup --dev (npm ci in gateway/e2e)", m)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node missing: run scripts/setup --dev")
	}
	p := startUp(t, t.TempDir(), t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", script, "--base-url", p.httpURL, "--key", p.key, "--out", t.TempDir()).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("client.spec.mjs: %v\n%s", err, p.logs)
	}
}

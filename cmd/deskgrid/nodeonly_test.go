package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sdkPrefixes are the import paths of the LLM providers' and clouds' SDKs
// (and deskgrid's own code that calls them), which the node image's binary
// must not link.
var sdkPrefixes = []string{
	"github.com/anthropics/",
	"github.com/openai/",
	"google.golang.org/genai",
	"github.com/aws/",
	"cloud.google.com/",
	"google.golang.org/api/",
	"github.com/deskgrid/deskgrid/services/agent/internal/provider",
}

// controlPlanePrefixes are the import paths of the control plane's services,
// which the node image's binary must not link either.
var controlPlanePrefixes = []string{
	"github.com/deskgrid/deskgrid/services/history",
	"github.com/deskgrid/deskgrid/services/agent",
	"github.com/deskgrid/deskgrid/gateway",
}

// linkedSDKs lists the packages of sdkPrefixes in ./cmd/deskgrid's build
// with the given tags.
func linkedSDKs(t *testing.T, tags string) []string {
	t.Helper()
	return linked(t, tags, sdkPrefixes)
}

// linked lists the packages under prefixes in ./cmd/deskgrid's build with
// the given tags.
func linked(t *testing.T, tags string, prefixes []string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-tags", tags, ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q: %v\n%s", tags, err, stderr.String())
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		for _, pre := range prefixes {
			if strings.HasPrefix(p, pre) {
				found = append(found, p)
				break
			}
		}
	}
	return found
}

// TestNodeOnlyBuildLinksNoLLMSDK: the node image's binary (-tags nodeonly)
// links no LLM or cloud SDK, while the full build does (so the check sees
// them when they are there).
func TestNodeOnlyBuildLinksNoLLMSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	if found := linkedSDKs(t, "nodeonly"); len(found) > 0 {
		t.Fatalf("the node-only build links %d SDK packages, first %v", len(found), found[:min(5, len(found))])
	}
	full := strings.Join(linkedSDKs(t, ""), " ")
	for _, want := range []string{"github.com/anthropics/anthropic-sdk-go", "github.com/openai/openai-go", "google.golang.org/genai"} {
		if !strings.Contains(full, want) {
			t.Errorf("the full build does not link %s: the check above proves nothing", want)
		}
	}
}

// TestNodeOnlyBuildLinksNoControlPlane: the node-only build links none of
// history's, the agent's or the gateway's packages, while the full build
// links them all.
func TestNodeOnlyBuildLinksNoControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	if found := linked(t, "nodeonly", controlPlanePrefixes); len(found) > 0 {
		t.Fatalf("the node-only build links %d control-plane packages, first %v", len(found), found[:min(5, len(found))])
	}
	full := strings.Join(linked(t, "", controlPlanePrefixes), " ")
	for _, want := range controlPlanePrefixes {
		if !strings.Contains(full, want) {
			t.Errorf("the full build does not link %s: the check above proves nothing", want)
		}
	}
}

// TestNodeOnlyBuildServesOnlyNodeRoles: the node-only binary refuses the
// control plane's roles with a usage error naming the build, and still runs
// the client commands.
func TestNodeOnlyBuildServesOnlyNodeRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "deskgrid")
	if out, err := exec.Command("go", "build", "-tags", "nodeonly", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nodeonly: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"up"},
		{"serve", "agent"},
		{"serve", "session"},
		{"serve", "history"},
		{"serve", "gateway"},
	} {
		cmd := exec.Command(bin, append(args, "-data-dir", dir, "-runtime-dir", dir)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "node-only build") {
			t.Errorf("deskgrid %v: want exit 2 saying node-only build, got %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "deskgrid ") {
		t.Errorf("deskgrid version: %v %q", err, out)
	}
	// A client command runs (and fails only for want of a server).
	cmd := exec.Command(bin, "sessions", "list", "-addr", "127.0.0.1:1", "-timeout", "2s")
	out, err = cmd.CombinedOutput()
	if strings.Contains(string(out), "node-only") || strings.Contains(string(out), "unknown command") {
		t.Errorf("deskgrid sessions list in the node-only build: %v\n%s", err, out)
	}
}

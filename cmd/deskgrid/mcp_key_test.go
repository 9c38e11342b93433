package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// `deskgrid mcp` without a key says so on stderr at start, and where it
// looks for one, since an MCP host shows only the tools' refusals.
func TestMCPWarnsWithoutKey(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DESKGRID_DATA_DIR", dir)
	t.Setenv("DESKGRID_API_KEY", "")
	var errb bytes.Buffer
	key := mcpKey(&errb, "")
	if key != "" {
		t.Fatalf("a key from nowhere: %q", key)
	}
	for _, want := range []string{"no API key", "DESKGRID_API_KEY", filepath.Join(dir, "admin.key")} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q, want it to name %q", errb.String(), want)
		}
	}
	errb.Reset()
	if key := mcpKey(&errb, "dg_0000000000000000_x"); key != "dg_0000000000000000_x" || errb.Len() != 0 {
		t.Errorf("with -api-key: key %q, stderr %q", key, errb.String())
	}
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// tenants and keys on a data dir no deskgrid has used say so: a new, empty
// key store that no running deskgrid reads is most likely a wrong -data-dir.
func TestKeyStoreInUnusedDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errs bytes.Buffer
	if err := runTenants(context.Background(), []string{"create", "acme", "-data-dir", dir}, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs.String(), "no deskgrid has used the data dir "+dir) {
		t.Fatalf("first use of %s: stderr %q, want it named as unused", dir, errs.String())
	}
	errs.Reset()
	if err := runTenants(context.Background(), []string{"list", "-data-dir", dir}, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if errs.Len() != 0 || !strings.Contains(out.String(), "acme") {
		t.Fatalf("second use: stdout %q stderr %q, want acme listed and no warning", out.String(), errs.String())
	}
}

package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

func TestQuickstartAgainstDeskgridUp(t *testing.T) {
	srv := deskgridtest.Start(t)
	t.Setenv("DESKGRID_API_KEY", srv.APIKey)
	out := filepath.Join(t.TempDir(), "shot.png")
	if err := run(srv.GRPCAddr, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() != 1024 {
		t.Fatalf("screenshot: %v %v", err, img)
	}
}

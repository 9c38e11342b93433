// Quickstart creates a desktop, types into it, runs a command in its
// sandbox, saves a screenshot and deletes the desktop.
//
//	bin/deskgrid up &
//	go run ./examples/quickstart -o shot.png
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

func main() {
	addr := flag.String("addr", envOr("DESKGRID_ADDR", "127.0.0.1:9090"), "deskgrid gRPC address")
	out := flag.String("o", "shot.png", "where to save the screenshot")
	flag.Parse()
	if err := run(*addr, *out); err != nil {
		log.Fatal(err)
	}
}

func run(addr, out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := deskgrid.New(addr, deskgrid.WithAPIKey(os.Getenv("DESKGRID_API_KEY")))
	if err != nil {
		return err
	}
	defer c.Close()

	s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 1024, Height: 768})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer s.Delete(context.Background())
	fmt.Printf("session %s on display %s\n", s.GetId(), s.GetXDisplay())

	res, err := s.Exec(ctx, "sh", "-c", "echo hello from $(uname -s) > hello.txt && cat hello.txt")
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	fmt.Printf("exec: exit %d, %s", res.ExitCode, res.Stdout)

	if err := s.MoveMouse(ctx, 512, 384); err != nil {
		return err
	}
	png, err := s.Screenshot(ctx)
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		return err
	}
	fmt.Printf("saved %s (%d bytes)\n", out, len(png))
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

package deskgrid_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strings"
	"testing"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

func TestSessionLifecycle(t *testing.T) {
	srv := deskgridtest.Start(t)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 640, Height: 480, Labels: map[string]string{"suite": "sdk"}})
	if err != nil {
		t.Fatal(err)
	}
	shot, err := s.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil || img.Bounds().Dx() != 640 || img.Bounds().Dy() != 480 {
		t.Fatalf("screenshot: %v %v", err, img.Bounds())
	}
	if err := s.MoveMouse(ctx, 10, 20); err != nil {
		t.Fatal(err)
	}
	if err := s.Click(ctx, 100, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Type(ctx, "héllo"); err != nil {
		t.Fatal(err)
	}
	if err := s.Key(ctx, "ctrl+a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Click(ctx, 5000, 5000); !errors.Is(err, deskgrid.ErrInvalidArgument) {
		t.Fatalf("click off screen: %v, want ErrInvalidArgument", err)
	}

	if err := s.Files().Write(ctx, "notes/todo.txt", []byte("buy milk\n"), 0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Exec(ctx, "cat", "notes/todo.txt")
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "buy milk\n" {
		t.Fatalf("exec: %v %+v", err, res)
	}
	res, err = s.Exec(ctx, "sh", "-c", "echo oops >&2; exit 3")
	if err != nil || res.ExitCode != 3 || !strings.Contains(string(res.Stderr), "oops") {
		t.Fatalf("exec failing command: %v %+v", err, res)
	}
	got, err := s.Files().Read(ctx, "notes/todo.txt")
	if err != nil || string(got) != "buy milk\n" {
		t.Fatalf("read: %v %q", err, got)
	}
	ents, err := s.Files().List(ctx, "notes")
	if err != nil || len(ents) != 1 || ents[0].GetName() != "todo.txt" {
		t.Fatalf("list: %v %v", err, ents)
	}

	n := 0
	for ss, err := range c.Sessions.List(ctx, deskgrid.ListOptions{Labels: map[string]string{"suite": "sdk"}, PageSize: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if ss.GetId() != s.GetId() {
			t.Fatalf("listed %s", ss.GetId())
		}
		n++
	}
	if n != 1 {
		t.Fatalf("listed %d sessions", n)
	}

	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil || s.GetState().String() != "SESSION_STATE_STOPPED" {
		t.Fatalf("after delete: %v %v", err, s.GetState())
	}
	if _, err := c.Sessions.Get(ctx, "s-aaaaaaaaaaaaaaaaaaaa"); !errors.Is(err, deskgrid.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := s.Screenshot(ctx); !errors.Is(err, deskgrid.ErrNotFound) {
		t.Fatalf("screenshot of a deleted session: %v", err)
	}
}

func TestCreateRetriesAreIdempotent(t *testing.T) {
	srv := deskgridtest.Start(t)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{RequestID: "same-request"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{RequestID: "same-request"})
	if err != nil {
		t.Fatal(err)
	}
	if a.GetId() != b.GetId() {
		t.Fatalf("the same request id made two sessions: %s, %s", a.GetId(), b.GetId())
	}
}

func TestUnavailableServerIsATypedError(t *testing.T) {
	c, err := deskgrid.New("127.0.0.1:1", deskgrid.WithRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Sessions.Get(ctx, "s-aaaaaaaaaaaaaaaaaaaa"); !errors.Is(err, deskgrid.ErrUnavailable) {
		t.Fatalf("get against nothing: %v, want ErrUnavailable", err)
	}
}

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/session"
	"github.com/deskgrid/deskgrid/services/session/cluster"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// gatedRegistry is an OCI registry on loopback (go-containerregistry's)
// that can stall downloads of one blob halfway until released.
type gatedRegistry struct {
	host    string
	gate    atomic.Pointer[string] // digest of the blob to stall
	waiting atomic.Int32           // downloads stalled so far
	release chan struct{}
	once    sync.Once
}

func startGatedRegistry(t *testing.T) *gatedRegistry {
	t.Helper()
	g := &gatedRegistry{release: make(chan struct{})}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := g.gate.Load(); d != nil && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+*d) {
			w = &stallWriter{ResponseWriter: w, g: g, ctx: r.Context(), after: 256 << 10}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		g.open()
		srv.Close()
	})
	g.host = strings.TrimPrefix(srv.URL, "http://")
	return g
}

func (g *gatedRegistry) open() { g.once.Do(func() { close(g.release) }) }

// stallWriter sends the first after bytes, then waits for the release.
type stallWriter struct {
	http.ResponseWriter
	g       *gatedRegistry
	ctx     context.Context
	after   int
	written int
	stalled bool
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if w.stalled || w.written+len(p) <= w.after {
		n, err := w.ResponseWriter.Write(p)
		w.written += n
		return n, err
	}
	head := w.after - w.written
	n, err := w.ResponseWriter.Write(p[:head])
	w.written += n
	if err != nil {
		return n, err
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	w.stalled = true
	w.g.waiting.Add(1)
	select {
	case <-w.g.release:
	case <-w.ctx.Done():
		return n, w.ctx.Err()
	}
	m, err := w.ResponseWriter.Write(p[head:])
	w.written += m
	return n + m, err
}

// pushTestImage pushes an image of two layers, one of them size random
// bytes, so each push is an image no node holds yet.
func pushTestImage(t *testing.T, ref string, size int) v1.Image {
	t.Helper()
	img := testImage(t, size)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return img
}

// testImage is an image of two layers, one of them size random bytes, so
// each is an image no node holds yet.
func testImage(t *testing.T, size int) v1.Image {
	t.Helper()
	layer := func(files map[string][]byte) v1.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for n, b := range files {
			_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))})
			_, _ = tw.Write(b)
		}
		_ = tw.Close()
		data := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, tarball.WithMediaType(types.DockerLayer))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	noise := make([]byte, size)
	_, _ = rand.Read(noise)
	img, err := mutate.AppendLayers(empty.Image, layer(map[string][]byte{"etc/motd": []byte("hello\n")}), layer(map[string][]byte{"data/noise": noise}))
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestClusterImagePull: two nodes, one session replica, a registry on
// loopback. Placement prefers the node that holds a session's image; a
// node without it pulls it, and the pull's progress reaches the session's
// events; `deskgrid images pull -all-nodes` pulls onto every node, reports
// each, and fails for an unknown image, an unreachable registry, or a node
// that dies mid-pull, which keeps nothing of it.
func TestClusterImagePull(t *testing.T) {
	deskgridBinary(t)
	rdb, prefix := redisPrefix(t)
	pg := postgresSchema(t)
	ns, _, _ := natstest.Start(t)
	reg := startGatedRegistry(t)
	c := &testCluster{t: t, reg: cluster.NewRegistry(rdb, prefix), nodes: map[string]*proc{}, nodeDirs: map[string][2]string{},
		common: []string{"-redis-url", testRedisURL(), "-redis-prefix", prefix}}
	for _, id := range []string{"n1", "n2"} {
		c.startNode(id, 5)
	}
	addr := freeAddr(t)
	c.replicas = append(c.replicas, startProc(t, "session", addr, append([]string{"serve", "session", "-grpc-addr", addr, "-postgres-url", pg, "-nats-url", ns.URL()}, c.common...)...))
	conn, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := sessionv1.NewSessionServiceClient(conn)
	c.clients = append(c.clients, client)
	nodeImages := func(id string) imagev1.ImageServiceClient {
		cc, err := dial(c.nodes[id].addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return imagev1.NewImageServiceClient(cc)
	}
	holds := func(id, ref string) bool {
		snap, err := c.reg.SnapshotFor(context.Background(), "", placement.ImageKeys("", ref))
		if err != nil {
			return false
		}
		for _, n := range snap {
			if n.ID == id {
				return n.HasImage
			}
		}
		return false
	}
	create := func(img string) *sessionv1.Session {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		w, h := int32(320), int32(240)
		resp, err := client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: img, Display: &sessionv1.DisplaySpec{Width: &w, Height: &h}})
		if err != nil {
			t.Fatalf("create from %s: %v\n%s", img, err, c.logs())
		}
		t.Cleanup(func() { c.delete(resp.GetSession().GetId()) })
		return resp.GetSession()
	}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(deskgridBinary(t), args...)
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+addr)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := 0
		if err := cmd.Run(); err != nil {
			code = cliExit(err)
		}
		return out.String(), errb.String(), code
	}

	t.Run("placement prefers the node holding the image", func(t *testing.T) {
		desk := reg.host + "/team/desk:v1"
		pushTestImage(t, desk, 4096)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pull, err := nodeImages("n2").PullImage(ctx, &imagev1.PullImageRequest{Ref: desk})
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := pull.Recv()
			if err != nil {
				t.Fatalf("pull onto n2: %v", err)
			}
			if m.GetImage() != nil {
				break
			}
		}
		c.waitFor("n2 reporting the image", 10*time.Second, func() bool { return holds("n2", desk) && !holds("n1", desk) })
		// Both nodes are empty: n2 takes sessions of the image until it
		// is half its capacity busier than n1.
		for i := range 3 {
			if s := create(desk); s.GetNodeId() != "n2" {
				t.Fatalf("session %d of an image only n2 holds placed on %s", i, s.GetNodeId())
			}
		}
	})

	t.Run("a node without the image pulls it with progress", func(t *testing.T) {
		fresh := reg.host + "/team/fresh:v1"
		img := pushTestImage(t, fresh, 256<<10)
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		msgs := make(chan *nats.Msg, 1024)
		sub, err := nc.ChanSubscribe(events.SubjectPrefix+".>", msgs)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		_ = nc.Flush()
		s := create(fresh)
		want, _ := img.Digest()
		if s.GetImageDigest() != want.String() {
			t.Fatalf("session runs %s, want %s", s.GetImageDigest(), want)
		}
		var pulls []*sessionv1.ImagePull
		deadline := time.After(10 * time.Second)
	collect:
		for {
			select {
			case m := <-msgs:
				_, ev, err := events.Decode(context.Background(), m.Data, m.Header)
				if err != nil || ev.GetType() != session.TypeImagePull || ev.GetSessionId() != s.GetId() {
					continue
				}
				var p sessionv1.ImagePull
				if err := ev.GetPayload().UnmarshalTo(&p); err != nil {
					t.Fatal(err)
				}
				pulls = append(pulls, &p)
				if p.GetProgress().GetPhase() == "done" {
					break collect
				}
			case <-deadline:
				t.Fatalf("no pull progress ending in done for %s: %v", s.GetId(), pulls)
			}
		}
		if len(pulls) < 2 || pulls[0].GetProgress().GetPhase() != "resolving" {
			t.Fatalf("pull progress %v", pulls)
		}
		sawBytes := false
		for _, p := range pulls {
			pr := p.GetProgress()
			if p.GetNodeId() != s.GetNodeId() || p.GetImage() != fresh || pr.GetDoneBytes() > pr.GetTotalBytes() {
				t.Fatalf("pull progress %v for a session on %s", p, s.GetNodeId())
			}
			sawBytes = sawBytes || (pr.GetPhase() != "resolving" && pr.GetTotalBytes() > 256<<10)
		}
		last := pulls[len(pulls)-1].GetProgress()
		if !sawBytes || last.GetDoneBytes() != last.GetTotalBytes() || last.GetLayersDone() != 2 || last.GetLayersTotal() != 2 {
			t.Fatalf("pull progress %v", pulls)
		}
		c.waitFor("the pulling node reporting the image", 10*time.Second, func() bool { return holds(s.GetNodeId(), fresh) })
	})

	t.Run("pull onto every node", func(t *testing.T) {
		desk := reg.host + "/team/desk:v1"
		out, errs, code := cli("images", "pull", "-all-nodes", desk)
		if code != 0 || !strings.Contains(out, "pulled onto 2 of 2 nodes") || strings.Count(out, "pulled ") != 3 {
			t.Fatalf("pull -all-nodes: exit %d\n%s%s", code, out, errs)
		}
		if !strings.Contains(errs, "n1: ") || !strings.Contains(errs, "layers 2/2") {
			t.Fatalf("no per-node progress: %s", errs)
		}
		c.waitFor("both nodes reporting the image", 10*time.Second, func() bool { return holds("n1", desk) && holds("n2", desk) })
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct{ ref, want string }{
			{reg.host + "/team/none:v1", "notfound"},
			{"127.0.0.1:1/nobody/here:v1", "unreachable"},
			{"Not A Ref", "invalidargument"},
		} {
			out, errs, code := cli("images", "pull", "-all-nodes", tc.ref)
			if code == 0 || !strings.Contains(errs, tc.want) || !strings.Contains(out, "pulled onto 0 of 2 nodes, failed on 2") {
				t.Errorf("pull -all-nodes %q: exit %d, want an error saying %q\n%s%s", tc.ref, code, tc.want, out, errs)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w, h := int32(320), int32(240)
		_, err := client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: reg.host + "/team/none:v1", Display: &sessionv1.DisplaySpec{Width: &w, Height: &h}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("create from an unknown image: %v, want NotFound", err)
		}
	})

	t.Run("a node that dies mid-pull keeps nothing of it", func(t *testing.T) {
		slow := reg.host + "/slow/desk:v1"
		layers, _ := pushTestImage(t, slow, 1<<20).Layers()
		big, _ := layers[1].Digest()
		d := big.String()
		reg.gate.Store(&d)
		cmd := exec.Command(deskgridBinary(t), "images", "pull", "-all-nodes", slow)
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+addr)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Both nodes have fetched part of the big layer when n1 dies.
		c.waitFor("both nodes fetching", 30*time.Second, func() bool { return reg.waiting.Load() >= 2 })
		c.nodes["n1"].kill9()
		if left, _ := os.ReadDir(filepath.Join(c.nodeDirs["n1"][0], "images", "tmp")); len(left) == 0 {
			t.Fatal("n1 died mid-pull without unfinished work in its store: the test no longer tests the cleanup")
		}
		reg.open()
		err := cmd.Wait()
		if err == nil || !strings.Contains(out.String(), "pulled onto 1 of 2 nodes, failed on 1") || !strings.Contains(out.String(), "n1") {
			t.Fatalf("pull while n1 died: %v\n%s%s", err, out.String(), errb.String())
		}
		// n1 comes back without a trace of the pull; n2 has the image.
		c.startNode("n1", 5)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := nodeImages("n1").GetImage(ctx, &imagev1.GetImageRequest{Ref: slow}); status.Code(err) != codes.NotFound {
			t.Fatalf("n1 after dying mid-pull: %v, want NotFound", err)
		}
		if left, _ := os.ReadDir(filepath.Join(c.nodeDirs["n1"][0], "images", "tmp")); len(left) != 0 {
			t.Fatalf("n1 kept unfinished work: %v", left)
		}
		if _, err := nodeImages("n2").GetImage(ctx, &imagev1.GetImageRequest{Ref: slow}); err != nil {
			t.Fatalf("n2: %v", err)
		}
		c.waitFor("n2, and not n1, reporting the image", 10*time.Second, func() bool { return holds("n2", slow) && !holds("n1", slow) })
	})

	t.Run("a create whose node dies mid-pull is placed on the other", func(t *testing.T) {
		reg2 := startGatedRegistry(t)
		img := reg2.host + "/team/far:v1"
		layers, _ := pushTestImage(t, img, 1<<20).Layers()
		big, _ := layers[1].Digest()
		d := big.String()
		reg2.gate.Store(&d)
		type result struct {
			s   *sessionv1.Session
			err error
		}
		done := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			w, h := int32(320), int32(240)
			resp, err := client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: img, Display: &sessionv1.DisplaySpec{Width: &w, Height: &h}})
			done <- result{resp.GetSession(), err}
		}()
		c.waitFor("a node fetching", 30*time.Second, func() bool { return reg2.waiting.Load() >= 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := client.ListSessions(ctx, &sessionv1.ListSessionsRequest{States: []sessionv1.SessionState{sessionv1.SessionState_SESSION_STATE_STARTING}})
		if err != nil || len(list.GetSessions()) != 1 {
			t.Fatalf("starting sessions %v %v", list.GetSessions(), err)
		}
		first := list.GetSessions()[0].GetNodeId()
		c.nodes[first].kill9()
		reg2.open()
		r := <-done
		if r.err != nil {
			t.Fatalf("create after its node died mid-pull: %v\n%s", r.err, c.logs())
		}
		t.Cleanup(func() { c.delete(r.s.GetId()) })
		if r.s.GetNodeId() == first || r.s.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
			t.Fatalf("session %v, want RUNNING off %s", r.s, first)
		}
		c.startNode(first, 5)
	})
}

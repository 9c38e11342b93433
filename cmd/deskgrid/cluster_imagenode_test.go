package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/session/cluster"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// TestClusterImagesOnNode: two nodes, a session service, a gateway and a
// registry on loopback. `deskgrid images list|inspect|rm|pull -node` and the
// REST routes with node_id reach the node named; list and inspect without a
// node ask every live node and say which hold the image; rm without one is
// refused; an unknown node is NOT_FOUND and a dead one UNAVAILABLE.
func TestClusterImagesOnNode(t *testing.T) {
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
	httpAddr := freeAddr(t)
	startProc(t, "gateway", httpAddr, append([]string{"serve", "gateway", "-http-addr", httpAddr,
		"-session-addr", addr, "-agent-addr", addr, "-history-addr", addr, "-nats-url", ns.URL()}, c.common...)...)

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
	ok := func(args ...string) string {
		t.Helper()
		out, errs, code := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s\n%s", args, code, out, errs, c.logs())
		}
		return out
	}
	fails := func(want string, args ...string) string {
		t.Helper()
		out, errs, code := cli(args...)
		if code == 0 || !strings.Contains(errs, want) {
			t.Fatalf("%v: exit %d, want an error saying %q\n%s%s", args, code, want, out, errs)
		}
		return errs
	}
	rest := func(method, path string, q url.Values) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+httpAddr+path+"?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	desk := reg.host + "/team/desk:v1"
	pushTestImage(t, desk, 4096)
	both := reg.host + "/team/both:v1"
	pushTestImage(t, both, 4096)

	if out := ok("images", "pull", "-node", "n2", desk); !strings.Contains(out, desk) {
		t.Fatalf("pull -node n2: %s", out)
	}
	ok("images", "pull", "-all-nodes", both)

	t.Run("list and inspect on a named node", func(t *testing.T) {
		if out := ok("images", "list", "-node", "n2"); !strings.Contains(out, desk) || !strings.Contains(out, both) || strings.Contains(out, "NODES") {
			t.Fatalf("list -node n2:\n%s", out)
		}
		if out := ok("images", "list", "-node", "n1"); strings.Contains(out, desk) || !strings.Contains(out, both) {
			t.Fatalf("list -node n1 (which never pulled %s):\n%s", desk, out)
		}
		var im imagev1.Image
		out := ok("images", "inspect", "-node", "n2", desk)
		if err := json.Unmarshal([]byte(out), &struct{ Ref *string }{&im.Ref}); err != nil || im.Ref != desk {
			t.Fatalf("inspect -node n2: %v\n%s", err, out)
		}
		fails("notfound", "images", "inspect", "-node", "n1", desk)
	})

	t.Run("without a node list and inspect ask every live node", func(t *testing.T) {
		out := ok("images", "list")
		lines := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				lines[f[0]] = l
			}
		}
		if !strings.Contains(lines["REF"], "NODES") || !strings.HasSuffix(lines[desk], " n2") || !strings.HasSuffix(lines[both], " n1,n2") {
			t.Fatalf("list of the cluster:\n%s", out)
		}
		var got struct{ NodeIds []string }
		out = ok("images", "inspect", both)
		if err := json.Unmarshal([]byte(out), &got); err != nil || strings.Join(got.NodeIds, ",") != "n1,n2" {
			t.Fatalf("inspect of the cluster: %v\n%s", err, out)
		}
		fails("notfound", "images", "inspect", reg.host+"/team/none:v1")
		fails("failedprecondition", "images", "rm", desk)
		fails("-node", "images", "rm", desk)
		fails("failedprecondition", "images", "pull", desk)
	})

	t.Run("REST with node_id", func(t *testing.T) {
		if code, body := rest(http.MethodGet, "/v1/images", url.Values{"node_id": {"n2"}}); code != http.StatusOK || !strings.Contains(body, desk) {
			t.Fatalf("GET /v1/images?node_id=n2: %d %.400s", code, body)
		}
		if code, body := rest(http.MethodGet, "/v1/images", nil); code != http.StatusOK || !strings.Contains(strings.ReplaceAll(body, " ", ""), `"nodeIds":["n1","n2"]`) {
			t.Fatalf("GET /v1/images: %d %.400s", code, body)
		}
		if code, body := rest(http.MethodGet, "/v1/images:get", url.Values{"ref": {desk}, "node_id": {"n1"}}); code != http.StatusNotFound {
			t.Fatalf("GET /v1/images:get on a node without it: %d %.400s", code, body)
		}
		if code, body := rest(http.MethodGet, "/v1/images", url.Values{"node_id": {"n9"}}); code != http.StatusNotFound {
			t.Fatalf("GET /v1/images?node_id=n9: %d %.400s", code, body)
		}
		if code, body := rest(http.MethodDelete, "/v1/images", url.Values{"ref": {desk}}); code != http.StatusBadRequest {
			t.Fatalf("DELETE /v1/images without a node: %d %.400s", code, body)
		}
	})

	t.Run("Go SDK on a named node", func(t *testing.T) {
		dg, err := deskgrid.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer dg.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if im, err := dg.Images.OnNode("n2").Get(ctx, desk); err != nil || im.GetRef() != desk {
			t.Fatalf("Images.OnNode(n2).Get: %v, %v", im, err)
		}
		code := func(err error) codes.Code {
			var e *deskgrid.Error
			if errors.As(err, &e) {
				return e.Code
			}
			return status.Code(err)
		}
		if _, err := dg.Images.OnNode("n1").Get(ctx, desk); code(err) != codes.NotFound {
			t.Fatalf("Images.OnNode(n1).Get: %v, want NotFound", err)
		}
		imgs, err := dg.Images.List(ctx)
		if err != nil || len(imgs) != 2 {
			t.Fatalf("Images.List: %v, %v", imgs, err)
		}
		if u, err := dg.Images.OnNode("n2").Usage(ctx); err != nil || u.GetImages() != 2 {
			t.Fatalf("Images.OnNode(n2).Usage: %v, %v", u, err)
		}
		if _, err := dg.Images.Usage(ctx); code(err) != codes.FailedPrecondition {
			t.Fatalf("Images.Usage without a node: %v, want FailedPrecondition", err)
		}
	})

	t.Run("rm on a named node", func(t *testing.T) {
		if out := ok("images", "rm", "-node", "n2", desk); !strings.Contains(out, "deleted "+desk) {
			t.Fatalf("rm -node n2: %s", out)
		}
		if out := ok("images", "list", "-node", "n2"); strings.Contains(out, desk) || !strings.Contains(out, both) {
			t.Fatalf("list -node n2 after rm:\n%s", out)
		}
		fails("notfound", "images", "inspect", "-node", "n2", desk)
		fails("notfound", "images", "rm", "-node", "n2", desk)
		// The other node's copy of an image is its own.
		ok("images", "rm", "-node", "n1", both)
		if out := ok("images", "inspect", both); !strings.Contains(out, `"n2"`) || strings.Contains(out, `"n1"`) {
			t.Fatalf("inspect after rm on n1:\n%s", out)
		}
	})

	// An archive for nodes that reach no registry: its name is one no
	// registry answers for, so a session of it runs only where it was
	// imported.
	air := "airgap.invalid/team/air:v1"
	airImg := testImage(t, 4096)
	airDigest, _ := airImg.Digest()
	archive := filepath.Join(t.TempDir(), "air.tar")
	airTag, _ := name.NewTag(air)
	if err := tarball.WriteToFile(archive, airTag, airImg); err != nil {
		t.Fatal(err)
	}

	t.Run("import onto a named node", func(t *testing.T) {
		fails("failedprecondition", "images", "import", archive)
		fails("-node", "images", "import", archive)
		fails("exclude each other", "images", "import", "-node", "n1", "-all-nodes", archive)
		if out := ok("images", "import", "-node", "n1", archive); !strings.Contains(out, air) || !strings.Contains(out, airDigest.String()[:19]) {
			t.Fatalf("import -node n1: %s", out)
		}
		if out := ok("images", "list", "-node", "n1"); !strings.Contains(out, air) {
			t.Fatalf("list -node n1 after the import:\n%s", out)
		}
		if out := ok("images", "list", "-node", "n2"); strings.Contains(out, air) {
			t.Fatalf("list -node n2 (which was sent nothing):\n%s", out)
		}
		var got struct{ NodeIds []string }
		if out := ok("images", "inspect", air); json.Unmarshal([]byte(out), &got) != nil || strings.Join(got.NodeIds, ",") != "n1" {
			t.Fatalf("inspect of the cluster after the import:\n%s", out)
		}

		// Placement finds it there: a session of it runs on n1 (n2 could
		// not pull it from anywhere).
		c.waitFor("n1 reporting the imported image", 10*time.Second, func() bool {
			snap, err := c.reg.SnapshotFor(context.Background(), "", placement.ImageKeys("", air))
			if err != nil {
				return false
			}
			held := map[string]bool{}
			for _, n := range snap {
				held[n.ID] = n.HasImage
			}
			return held["n1"] && !held["n2"]
		})
		conn, err := dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sessions := sessionv1.NewSessionServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		w, h := int32(320), int32(240)
		resp, err := sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: air, Display: &sessionv1.DisplaySpec{Width: &w, Height: &h}})
		if err != nil {
			t.Fatalf("create from the imported image: %v\n%s", err, c.logs())
		}
		s := resp.GetSession()
		if _, err := sessions.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: s.GetId()}); err != nil {
			t.Fatalf("delete %s: %v", s.GetId(), err)
		}
		if s.GetNodeId() != "n1" || s.GetImageDigest() != airDigest.String() {
			t.Fatalf("session of the image imported onto n1 runs on %s from %s", s.GetNodeId(), s.GetImageDigest())
		}

		// A broken archive fails on the node, with its reason, and leaves
		// the node's store as it was.
		broken := filepath.Join(t.TempDir(), "broken.tar")
		if err := os.WriteFile(broken, bytes.Repeat([]byte("not a tar "), 100000), 0o644); err != nil {
			t.Fatal(err)
		}
		fails("invalidargument", "images", "import", "-node", "n2", broken)

		// The Go SDK names the node in the header.
		dg, err := deskgrid.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer dg.Close()
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sdkRef := "airgap.invalid/team/air:sdk"
		if imgs, err := dg.Images.OnNode("n2").Import(ctx, f, sdkRef); err != nil || len(imgs) != 1 || imgs[0].GetRef() != sdkRef {
			t.Fatalf("Images.OnNode(n2).Import: %v, %v", imgs, err)
		}
		if out := ok("images", "list", "-node", "n2"); !strings.Contains(out, sdkRef) || strings.Contains(out, air+" ") {
			t.Fatalf("list -node n2 after the SDK's import:\n%s", out)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var e *deskgrid.Error
		if _, err := dg.Images.Import(ctx, f, sdkRef); !errors.As(err, &e) || e.Code != codes.FailedPrecondition {
			t.Fatalf("Images.Import without a node: %v, want FailedPrecondition", err)
		}

		// Every live node in turn.
		every := "airgap.invalid/team/air:every"
		out := ok("images", "import", "-all-nodes", "-tag", every, archive)
		if !strings.Contains(out, "imported onto 2 of 2 nodes") || strings.Count(out, "imported ") != 3 || strings.Contains(out, "failed") {
			t.Fatalf("import -all-nodes:\n%s", out)
		}
		if out := ok("images", "inspect", every); json.Unmarshal([]byte(out), &got) != nil || strings.Join(got.NodeIds, ",") != "n1,n2" {
			t.Fatalf("inspect after import -all-nodes:\n%s", out)
		}
		out, errs, code := cli("images", "import", "-all-nodes", broken)
		if code == 0 || !strings.Contains(out, "imported onto 0 of 2 nodes, failed on 2") || strings.Count(out, "failed: invalidargument") != 2 {
			t.Fatalf("import -all-nodes of a broken archive: exit %d\n%s%s", code, out, errs)
		}
	})

	t.Run("unknown node", func(t *testing.T) {
		for _, args := range [][]string{
			{"images", "list", "-node", "n9"},
			{"images", "inspect", "-node", "n9", both},
			{"images", "rm", "-node", "n9", both},
			{"images", "pull", "-node", "n9", both},
			{"images", "import", "-node", "n9", archive},
		} {
			if errs := fails("notfound", args...); !strings.Contains(errs, "n9") {
				t.Fatalf("%v: %s", args, errs)
			}
		}
	})

	t.Run("dead node", func(t *testing.T) {
		c.nodes["n1"].kill9()
		// Still in the registry as alive: the call finds no one there.
		fails("unavailable", "images", "list", "-node", "n1")
		fails("unavailable", "images", "inspect", "-node", "n1", both)
		fails("unavailable", "images", "rm", "-node", "n1", both)
		fails("unavailable", "images", "import", "-node", "n1", archive)
		// Every live node in turn: n1, alive by its last heartbeat, fails.
		if out, errs, code := cli("images", "import", "-all-nodes", "-tag", "airgap.invalid/team/air:late", archive); code == 0 ||
			!strings.Contains(out, "imported onto 1 of 2 nodes, failed on 1") || !strings.Contains(out, "failed: unavailable") || !strings.Contains(out, "n2  ") {
			t.Fatalf("import -all-nodes with n1 killed: exit %d\n%s%s", code, out, errs)
		}
		c.waitFor("n1 declared down", 60*time.Second, func() bool {
			n, err := c.reg.Node(context.Background(), "n1")
			return err == nil && !n.Alive
		})
		if errs := fails("unavailable", "images", "list", "-node", "n1"); !strings.Contains(errs, "down") {
			t.Fatalf("list on a node declared down: %s", errs)
		}
		if errs := fails("unavailable", "images", "import", "-node", "n1", archive); !strings.Contains(errs, "down") {
			t.Fatalf("import onto a node declared down: %s", errs)
		}
		if code, body := rest(http.MethodGet, "/v1/images", url.Values{"node_id": {"n1"}}); code != http.StatusServiceUnavailable {
			t.Fatalf("GET /v1/images?node_id=n1 (down): %d %.400s", code, body)
		}
		// The cluster's list is the live nodes'.
		if out := ok("images", "list"); !strings.Contains(out, both) || strings.Contains(out, "n1") {
			t.Fatalf("list with n1 down:\n%s", out)
		}
	})
}

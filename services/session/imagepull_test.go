package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/state"
)

// A create whose node lacks the image has the node pull it first, and the
// pull's progress reaches the session's events and its watchers: phases,
// layers and bytes done of the total, ending with everything done.
func TestCreatePullsImageWithProgress(t *testing.T) {
	h := newHarness(t)
	const img = "registry.test/team/desk:v1"
	h.node.mu.Lock()
	h.node.lacks = map[string]bool{img: true}
	h.node.mu.Unlock()
	entered, release := h.node.hold("image.pull")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := make(chan error, 1)
	go func() {
		_, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: img})
		created <- err
	}()
	select {
	case <-entered:
	case err := <-created:
		t.Fatalf("create ended before pulling: %v", err)
	}
	list, err := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{})
	if err != nil || len(list.GetSessions()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	id := list.GetSessions()[0].GetId()
	watch, err := h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := watch.Recv()
	if err != nil || first.GetSession().GetState() != state.Starting || first.GetSession().GetNodeId() != "node-1" {
		t.Fatalf("first watch message %v, %v; want the session STARTING on its node", first, err)
	}
	release()

	var pulls []*sessionv1.ImagePull
	for {
		m, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch: %v (pulls seen %v)", err, pulls)
		}
		if p := m.GetImagePull(); p != nil {
			if m.GetSession() != nil {
				t.Fatal("a pull message carries a session")
			}
			pulls = append(pulls, p)
			continue
		}
		if m.GetSession().GetState() == state.Running {
			break
		}
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if len(pulls) < 3 {
		t.Fatalf("pull messages %v", pulls)
	}
	var phases []string
	for _, p := range pulls {
		if p.GetNodeId() != "node-1" || p.GetImage() != img {
			t.Fatalf("pull message %v", p)
		}
		if pr := p.GetProgress(); pr.GetDoneBytes() > pr.GetTotalBytes() || pr.GetLayersDone() > pr.GetLayersTotal() {
			t.Fatalf("progress beyond its total: %v", pr)
		}
		if len(phases) == 0 || phases[len(phases)-1] != p.GetProgress().GetPhase() {
			phases = append(phases, p.GetProgress().GetPhase())
		}
	}
	if !slices.Equal(phases, []string{"resolving", "fetching", "done"}) {
		t.Fatalf("phases %v", phases)
	}
	last := pulls[len(pulls)-1].GetProgress()
	if last.GetDoneBytes() != 1000 || last.GetTotalBytes() != 1000 || last.GetLayersDone() != 2 || last.GetLayersTotal() != 2 {
		t.Fatalf("last progress %v", last)
	}
	calls := strings.Join(h.node.Calls(), "\n")
	if !strings.Contains(calls, "image.pull "+img) || strings.Index(calls, "image.pull") > strings.Index(calls, "sandbox.create") {
		t.Fatalf("the pull must come before the sandbox: %s", calls)
	}

	// A node holding the image pulls nothing.
	before := len(h.node.Calls())
	if _, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: img}); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.node.Calls()[before:] {
		if strings.HasPrefix(c, "image.pull") {
			t.Fatalf("pulled an image the node holds: %v", h.node.Calls()[before:])
		}
	}
}

// A pull the node refuses (an unknown image, a registry that is
// unreachable) fails the create with the node's reason and code, on that
// node only, leaving no sandbox and a FAILED session.
func TestCreatePullFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"unknown image", status.Error(codes.NotFound, "pull registry.test/team/none:v1: MANIFEST_UNKNOWN: not found"), codes.NotFound},
		{"registry unreachable", status.Error(codes.Unavailable, "pull registry.test/team/none:v1: the registry is unreachable: connection refused"), codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			const img = "registry.test/team/none:v1"
			h.node.mu.Lock()
			h.node.lacks = map[string]bool{img: true}
			h.node.mu.Unlock()
			h.node.failOn("image.pull", tc.err)
			sub, err := h.nc.SubscribeSync(events.SubjectPrefix + ".>")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Image: img})
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), "pull") {
				t.Fatalf("create: %v, want %s with the node's reason", err, tc.code)
			}
			pulls := 0
			for _, c := range h.node.Calls() {
				if strings.HasPrefix(c, "image.pull") {
					pulls++
				}
				if strings.HasPrefix(c, "sandbox.create") {
					t.Fatalf("a sandbox was made for an image the node could not pull: %v", h.node.Calls())
				}
			}
			if pulls != 1 {
				t.Fatalf("pulled %d times, want once: %v", pulls, h.node.Calls())
			}
			list, _ := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{})
			if len(list.GetSessions()) != 1 || list.GetSessions()[0].GetState() != state.Failed {
				t.Fatalf("sessions %v", list.GetSessions())
			}
			if h.placer.Used() != 0 {
				t.Fatalf("the placement is still held")
			}
			// No pull progress was published for a pull that never ran.
			for {
				m, err := sub.NextMsg(100 * time.Millisecond)
				if errors.Is(err, nats.ErrTimeout) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if decodeImagePull(ctx, m) != nil {
					t.Fatalf("pull progress published for a failed pull")
				}
			}
		})
	}
}

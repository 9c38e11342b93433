package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/trail"
)

var roles = []string{"node", "display", "sandbox", "session", "history", "agent", "gateway"}

// nodeOnlyRoles says why a node-only build (-tags nodeonly) refuses a role.
const nodeOnlyRoles = "this deskgrid is a node-only build (-tags nodeonly): it serves node, display and sandbox, and runs the client commands; the control plane's roles need the full build"

// runServe runs one role in this process.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return usageError("serve: want a role: %v", roles)
	}
	role := args[0]
	cfg, rest, err := parseServerFlags("serve "+role, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError("serve %s: unexpected arguments %q", role, rest)
	}
	switch role {
	case "node", "display", "sandbox", "session", "history", "agent", "gateway":
	default:
		return usageError("serve: unknown role %q, want one of %v", role, roles)
	}
	if nodeOnly && role != "node" && role != "display" && role != "sandbox" {
		return usageError("serve %s: %s", role, nodeOnlyRoles)
	}
	if err := checkExposure(role, cfg); err != nil {
		return err
	}
	for _, d := range []string{cfg.DataDir, cfg.RuntimeDir} {
		if role == "gateway" || role == "agent" {
			break
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if role == "node" || role == "display" || role == "sandbox" {
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	s, err := newSetup(ctx, role, cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if serr := s.shutdown(); serr != nil && err == nil {
			err = serr
		}
	}()

	if role != "gateway" {
		maddr, err := s.serveMetrics()
		if err != nil {
			return err
		}
		if maddr != "" {
			fmt.Fprintf(stdout, "deskgrid %s metrics on http://%s/metrics\n", role, maddr)
		}
	}
	if role == "gateway" {
		addr, err := s.startGateway(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deskgrid gateway on http://%s\n", addr)
		<-ctx.Done()
		return nil
	}

	var (
		rec    *trail.Recorder
		act    *activity.Tracker
		nodeJS jetstream.JetStream
	)
	if role == "node" || role == "display" || role == "sandbox" {
		// The calls made on a node go to the history through the event
		// stream, and are reported as uses of their sessions; a node
		// without one records none.
		if cfg.NATSURL == "" {
			s.logger.Warn("no -nats-url: calls made on this node's sessions are not recorded in their history, nor count as their use for the idle timeout")
		} else {
			nc, js, err := s.natsConn(ctx, false)
			if err != nil {
				return err
			}
			nodeJS = js
			if rec, err = s.trail(js); err != nil {
				return err
			}
			if act, err = s.activityTracker(nc); err != nil {
				return err
			}
		}
	}
	srv, lis, err := s.grpcServer(ctx, rec, act)
	if err != nil {
		return err
	}
	var n *node
	switch role {
	case "node", "display", "sandbox":
		if n, err = s.addNode(ctx, srv, nodeJS, role != "sandbox", role != "display"); err != nil {
			return err
		}
	case "session":
		nc, js, err := s.natsConn(ctx, false)
		if err != nil {
			return err
		}
		if _, err := s.addSession(ctx, srv, nc, js, false); err != nil {
			return err
		}
	case "history":
		_, js, err := s.natsConn(ctx, false)
		if err != nil {
			return err
		}
		if err := s.addHistory(ctx, srv, js); err != nil {
			return err
		}
	case "agent":
		nc, js, err := s.natsConn(ctx, false)
		if err != nil {
			return err
		}
		act, err := s.activityTracker(nc)
		if err != nil {
			return err
		}
		if err := s.addAgent(ctx, srv, nc, js, act); err != nil {
			return err
		}
	}
	s.serveGRPC(srv, lis)
	if n != nil && s.clustered() {
		// Registered only once serving: placements may arrive at once.
		if err := s.joinCluster(ctx, n, lis.Addr().String()); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "deskgrid %s on %s\n", role, lis.Addr())
	<-ctx.Done()
	return nil
}

// runNodes lists, drains and undrains the nodes of a cluster through the
// session service's NodeService.
func runNodes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("nodes: want list, get, drain or undrain")
	}
	sub, args := args[0], args[1:]
	cl, err := parseCLI("nodes "+sub, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	pos := cl.pos
	want := 1
	if sub == "list" {
		want = 0
	}
	if len(pos) != want {
		return usageError("nodes %s: want %d argument(s) (a node id), got %q", sub, want, pos)
	}
	if err := cl.connect(ctx); err != nil {
		return err
	}
	defer cl.close()
	ctx = cl.ctx
	c := sessionv1.NewNodeServiceClient(cl.conn)
	var nodes []*sessionv1.Node
	switch sub {
	case "list":
		resp, err := c.ListNodes(ctx, &sessionv1.ListNodesRequest{})
		if err != nil {
			return rpcError(err)
		}
		nodes = resp.GetNodes()
	case "get":
		resp, err := c.GetNode(ctx, &sessionv1.GetNodeRequest{NodeId: pos[0]})
		if err != nil {
			return rpcError(err)
		}
		nodes = append(nodes, resp.GetNode())
	case "drain":
		resp, err := c.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: pos[0]})
		if err != nil {
			return rpcError(err)
		}
		nodes = append(nodes, resp.GetNode())
	case "undrain":
		resp, err := c.UndrainNode(ctx, &sessionv1.UndrainNodeRequest{NodeId: pos[0]})
		if err != nil {
			return rpcError(err)
		}
		nodes = append(nodes, resp.GetNode())
	default:
		return usageError("nodes: unknown command %q, want list, get, drain or undrain", sub)
	}
	return printNodes(stdout, cl.cf.output, nodes...)
}

func printNodes(w io.Writer, output string, nodes ...*sessionv1.Node) error {
	if output == "json" {
		m := protojson.MarshalOptions{Multiline: true, Indent: "  "}
		for _, n := range nodes {
			b, err := m.Marshal(n)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tSESSIONS\tADDRESS\tLABELS")
	for _, n := range nodes {
		labels := make([]string, 0, len(n.GetLabels()))
		for k, v := range n.GetLabels() {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", n.GetId(),
			strings.ToLower(strings.TrimPrefix(n.GetState().String(), "NODE_STATE_")),
			n.GetUsed().GetSessions(), n.GetCapacity().GetSessions(), n.GetAddress(), dash(strings.Join(labels, ",")))
	}
	return tw.Flush()
}

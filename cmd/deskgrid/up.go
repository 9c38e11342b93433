//go:build !nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"os"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/session/state"
)

// runUp runs every service in this process: embedded NATS, SQLite, one node.
// The services still talk to each other over gRPC, as they do in a cluster.
func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, rest, err := parseServerFlags("up", args, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError("up: unexpected arguments %q", rest)
	}
	for _, d := range []string{cfg.DataDir, cfg.RuntimeDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := newSetup(ctx, "up", cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if serr := s.shutdown(); serr != nil && err == nil {
			err = serr
		}
	}()

	nc, js, err := s.natsConn(ctx, true)
	if err != nil {
		return err
	}
	rec, err := s.trail(js)
	if err != nil {
		return err
	}
	// One tracker for the node's calls and the agent's runs.
	act, err := s.activityTracker(nc)
	if err != nil {
		return err
	}
	srv, lis, err := s.grpcServer(ctx, rec, act)
	if err != nil {
		return err
	}
	// Every service of this process, and the gateway, talk to this one
	// listener, wherever -grpc-addr put it.
	self := dialAddr(lis.Addr())
	cfg.NodeAddr, cfg.SessionAddr, cfg.AgentAddr, cfg.HistoryAddr = self, self, self, self
	if _, err := s.addNode(ctx, srv, js, true, true); err != nil {
		return err
	}
	sess, err := s.addSession(ctx, srv, nc, js, true)
	if err != nil {
		return err
	}
	if err := s.addHistory(ctx, srv, js); err != nil {
		return err
	}
	if err := s.addAgent(ctx, srv, nc, js, act); err != nil {
		return err
	}
	s.serveGRPC(srv, lis)
	// Before the gRPC server drains, stop every session this process runs so
	// the records say STOPPED and the node frees everything.
	s.closers.add("sessions", func(ctx context.Context) error { return stopAllSessions(ctx, sess) })
	// Before the gateway answers, so a client that sees it ready finds the key.
	if err := s.firstKey(ctx, stdout); err != nil {
		return err
	}
	httpAddr, err := s.startGateway(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deskgrid is up\n  REST     http://%s   (OpenAPI at /openapi.json)\n  gRPC     %s\n  data     %s\nCtrl-C stops it and every session.\n", httpAddr, lis.Addr(), cfg.DataDir)
	s.logger.Info("deskgrid is up", "http", httpAddr, "grpc", lis.Addr().String(), "data", cfg.DataDir)

	<-ctx.Done()
	s.logger.Info("shutting down")
	return nil
}

// stopAllSessions deletes every session that is not finished.
func stopAllSessions(ctx context.Context, svc sessionv1.SessionServiceServer) error {
	var live []*sessionv1.Session
	req := &sessionv1.ListSessionsRequest{PageSize: 1000}
	for {
		// As the system: every tenant's sessions.
		resp, err := svc.ListSessions(auth.AsSystem(ctx), req)
		if err != nil {
			return err
		}
		for _, ss := range resp.GetSessions() {
			if !state.IsTerminal(ss.GetState()) {
				live = append(live, ss)
			}
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	var firstErr error
	for _, ss := range live {
		// Each delete acts for the session's own tenant, as its owner would.
		tctx := auth.WithPrincipal(ctx, auth.Principal{System: true, Tenant: ss.GetTenant()})
		if _, err := svc.DeleteSession(tctx, &sessionv1.DeleteSessionRequest{SessionId: ss.GetId()}); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("stop session %s: %w", ss.GetId(), err)
		}
	}
	return firstErr
}

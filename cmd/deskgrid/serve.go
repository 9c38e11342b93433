package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

var roles = []string{"node", "display", "sandbox", "session", "history", "agent", "gateway"}

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
	for _, d := range []string{cfg.DataDir, cfg.RuntimeDir} {
		if role == "gateway" || role == "agent" {
			break
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
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

	if role == "gateway" {
		addr, err := s.startGateway(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deskgrid gateway on http://%s\n", addr)
		<-ctx.Done()
		return nil
	}

	srv, lis, err := s.grpcServer()
	if err != nil {
		return err
	}
	switch role {
	case "node", "display", "sandbox":
		if _, err := s.addNode(ctx, srv, role != "sandbox", role != "display"); err != nil {
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
		if err := s.addAgent(ctx, srv); err != nil {
			return err
		}
	}
	s.serveGRPC(srv, lis)
	fmt.Fprintf(stdout, "deskgrid %s on %s\n", role, lis.Addr())
	<-ctx.Done()
	return nil
}

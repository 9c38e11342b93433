package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// runSessionVerb handles sessions watch, suspend, resume and keepalive.
func runSessionVerb(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	var mode string
	c, err := newCLI(ctx, "sessions "+sub, args, stdout, stderr, func(fs *flag.FlagSet) {
		if sub == "suspend" {
			fs.StringVar(&mode, "mode", "freeze", "freeze (keeps memory) or hibernate (frees it)")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.want(1, "sessions "+sub+" <id>"); err != nil {
		return err
	}
	sc := sessionv1.NewSessionServiceClient(c.conn)
	id := c.pos[0]
	var s *sessionv1.Session
	switch sub {
	case "watch":
		st, err := sc.WatchSession(c.ctx, &sessionv1.WatchSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return receive(st, func(m *sessionv1.WatchSessionResponse) error {
			if c.cf.output == "json" {
				return c.print(m.GetSession())
			}
			ss := m.GetSession()
			fmt.Fprintf(stdout, "%s %s %s\n", time.Now().Format(time.TimeOnly), lower("SESSION_STATE_", ss.GetState().String()), ss.GetStateReason())
			return nil
		})
	case "suspend":
		v, ok := sessionv1.SuspendMode_value["SUSPEND_MODE_"+strings.ToUpper(mode)]
		if !ok {
			return usageError("-mode %q: want freeze or hibernate", mode)
		}
		resp, err := sc.SuspendSession(c.ctx, &sessionv1.SuspendSessionRequest{SessionId: id, Mode: sessionv1.SuspendMode(v)})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	case "resume":
		resp, err := sc.ResumeSession(c.ctx, &sessionv1.ResumeSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	case "keepalive":
		resp, err := sc.KeepaliveSession(c.ctx, &sessionv1.KeepaliveSessionRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		s = resp.GetSession()
	}
	return printSessions(stdout, c.cf.output, s)
}

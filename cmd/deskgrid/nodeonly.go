//go:build nodeonly

// A node-only deskgrid, built with -tags nodeonly: the node image's binary
// (deploy/docker/Dockerfile.node). It serves a node's roles (serve node,
// display, sandbox) and runs the client commands. The control plane's roles
// (up, serve session|history|agent|gateway: up.go, control_roles.go,
// agent_role.go) are not in it, and with them neither history, the agent,
// the gateway nor any LLM provider's or cloud's SDK: those roles refuse to
// start. (The node still links the session service's cluster registry and
// placement, to join a cluster, and the session package for its desktop
// defaults.) TestNodeOnlyBuildLinksNoLLMSDK and
// TestNodeOnlyBuildLinksNoControlPlane keep it so.

package main

import (
	"context"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/session"
)

// nodeOnly: this binary serves only a node's roles.
const nodeOnly = true

// defaultProviderBaseURLs: no run is made here, so none.
var defaultProviderBaseURLs []string

func (s *setup) addAgent(context.Context, *grpcserver.Server, *nats.Conn, jetstream.JetStream, *activity.Tracker) error {
	return usageError("agent: %s", nodeOnlyRoles)
}

func runUp(context.Context, []string, io.Writer, io.Writer) error {
	return usageError("up: %s", nodeOnlyRoles)
}

func (s *setup) addSession(context.Context, *grpcserver.Server, *nats.Conn, jetstream.JetStream, bool) (*session.Service, error) {
	return nil, usageError("session: %s", nodeOnlyRoles)
}

func (s *setup) addHistory(context.Context, *grpcserver.Server, jetstream.JetStream) error {
	return usageError("history: %s", nodeOnlyRoles)
}

func (s *setup) startGateway(context.Context) (string, error) {
	return "", usageError("gateway: %s", nodeOnlyRoles)
}

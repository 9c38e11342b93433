//go:build nodeonly

// A node-only deskgrid, built with -tags nodeonly: the node image's binary
// (deploy/docker/Dockerfile.node). It serves a node's roles (serve node,
// display, sandbox) and runs the client commands; the agent role, and with it
// every LLM provider's and cloud's SDK, is not in it, and the roles that run
// the agent or the control plane (up, serve session|history|agent|gateway)
// refuse to start. TestNodeOnlyBuildLinksNoLLMSDK keeps it so.

package main

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// nodeOnly: this binary serves only a node's roles.
const nodeOnly = true

// defaultProviderBaseURLs: no run is made here, so none.
var defaultProviderBaseURLs []string

func (s *setup) addAgent(context.Context, *grpcserver.Server, *nats.Conn, jetstream.JetStream, *activity.Tracker) error {
	return usageError("agent: %s", nodeOnlyRoles)
}

// Package agent serves agent runs: an LLM-driven loop over a session's
// display and sandbox.
//
// This version registers the API and validates requests; the loop itself and
// its providers are not wired yet, so every run request that passes
// validation is answered with codes.Unimplemented.
package agent

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

// Config configures the agent service.
type Config struct{}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{} }

// Deps are what the agent service uses.
type Deps struct {
	Logger *slog.Logger
}

// Service implements agentv1.AgentServiceServer.
type Service struct {
	agentv1.UnimplementedAgentServiceServer
	logger *slog.Logger
}

// New returns the agent service.
func New(_ context.Context, _ Config, deps Deps) (*Service, error) {
	l := deps.Logger
	if l == nil {
		l = slog.Default()
	}
	return &Service{logger: l}, nil
}

// Register adds the service to r.
func (s *Service) Register(r grpc.ServiceRegistrar) { agentv1.RegisterAgentServiceServer(r, s) }

// Close stops the service.
func (s *Service) Close(context.Context) error { return nil }

var errNoRuns = status.Error(codes.Unimplemented, "agent runs are not available in this deskgrid version")

// CreateRun validates the request; runs are not executed yet.
func (s *Service) CreateRun(_ context.Context, req *agentv1.CreateRunRequest) (*agentv1.CreateRunResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id is required")
	}
	if req.GetPrompt() == "" {
		return nil, status.Error(codes.InvalidArgument, "prompt is required")
	}
	return nil, errNoRuns
}

package agent

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

func TestCreateRunValidatesThenSaysUnimplemented(t *testing.T) {
	s, err := New(context.Background(), DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *agentv1.CreateRunRequest
		want codes.Code
	}{
		{"no session", &agentv1.CreateRunRequest{Prompt: "hi"}, codes.InvalidArgument},
		{"no prompt", &agentv1.CreateRunRequest{SessionId: "s-1"}, codes.InvalidArgument},
		{"valid", &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "hi"}, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.CreateRun(context.Background(), tt.req)
			if status.Code(err) != tt.want {
				t.Fatalf("CreateRun: %v, want %v", err, tt.want)
			}
		})
	}
}

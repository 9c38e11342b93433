package tools

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/platform/computeruse"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

// refusingDisplay answers every action with err.
type refusingDisplay struct {
	displayv1.DisplayServiceClient
	err error
}

func (d refusingDisplay) PerformActions(context.Context, *displayv1.PerformActionsRequest, ...grpc.CallOption) (*displayv1.PerformActionsResponse, error) {
	return nil, d.err
}

// A run ends when the display says its input lease has passed to another
// holder, told by the error's reason; any other refusal, whatever its words,
// goes back to the model as a tool error it may correct.
func TestExecutorStaleLease(t *testing.T) {
	call := &provider.ToolCall{Name: provider.ToolComputer, Dialect: provider.DialectAnthropic,
		Input: json.RawMessage(`{"action":"left_click","coordinate":[10,10]}`)}
	sc := computeruse.Scale{DisplayW: 100, DisplayH: 100, ModelW: 100, ModelH: 100}

	stale := &Executor{Display: refusingDisplay{err: errinfo.Error(codes.FailedPrecondition, errinfo.StaleInputLease, "input lease token 4 is older than 5")}, SessionID: "s", Scale: sc}
	if _, err := stale.Run(context.Background(), call); !errors.Is(err, ErrStaleLease) {
		t.Fatalf("stale lease: %v, want ErrStaleLease", err)
	}

	other := &Executor{Display: refusingDisplay{err: status.Error(codes.FailedPrecondition, "the lease of the clipboard is not what you think")}, SessionID: "s", Scale: sc}
	r, err := other.Run(context.Background(), call)
	if err != nil || !r.IsError || r.Text == "" {
		t.Fatalf("other refusal: %+v, %v; want an error result for the model", r, err)
	}
}

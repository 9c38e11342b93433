package display

import (
	"context"
	"errors"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// PerformActions sends input to the session's display.
func (s *Service) PerformActions(ctx context.Context, req *displayv1.PerformActionsRequest) (*displayv1.PerformActionsResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if _, err := s.get(ctx, req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return nil, s.toStatus(ctx, errors.New("input is not available yet"))
}

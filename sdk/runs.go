package deskgrid

import (
	"context"
	"errors"
	"io"
	"iter"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

// Runs is the agent-run API.
type Runs struct{ c *Client }

// RunOptions describe a run.
type RunOptions struct {
	// Provider is "anthropic", "openai" or "gemini"; Model the provider's model name.
	Provider, Model string
	MaxSteps        int
	// APIKey and BaseURL are used for this run only.
	APIKey, BaseURL string
	// AccessibilityTree gives the model the screen's accessibility tree as
	// text beside each screenshot.
	AccessibilityTree bool
	// Record records the session's screen for the run's length; the run's
	// RecordingId names the video (Session.DownloadRecording).
	Record bool
}

// Create starts an agent loop on a session.
func (r *Runs) Create(ctx context.Context, sessionID, prompt string, o RunOptions) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.CreateRun(ctx, &agentv1.CreateRunRequest{
		SessionId: sessionID, Prompt: prompt, Provider: o.Provider, Model: o.Model,
		MaxSteps: int32(o.MaxSteps), ApiKey: o.APIKey, BaseUrl: o.BaseURL,
		Options: runOptions(o),
	})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// Get returns a run.
func (r *Runs) Get(ctx context.Context, id string) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.GetRun(ctx, &agentv1.GetRunRequest{RunId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// Cancel stops a run.
func (r *Runs) Cancel(ctx context.Context, id string) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.CancelRun(ctx, &agentv1.CancelRunRequest{RunId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// Events yields a run's events after the given sequence number until the run
// ends or ctx does.
func (r *Runs) Events(ctx context.Context, runID string, afterSequence int64) iter.Seq2[*agentv1.RunEvent, error] {
	return func(yield func(*agentv1.RunEvent, error) bool) {
		st, err := r.c.agent.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{RunId: runID, AfterSequence: afterSequence})
		if err != nil {
			yield(nil, wrap(err))
			return
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			if !yield(m.GetEvent(), nil) {
				return
			}
		}
	}
}

func runOptions(o RunOptions) *agentv1.RunOptions {
	if !o.Record && !o.AccessibilityTree {
		return nil
	}
	return &agentv1.RunOptions{Record: o.Record, AccessibilityTree: o.AccessibilityTree}
}

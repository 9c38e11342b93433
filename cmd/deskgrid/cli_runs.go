package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

// runRuns starts, watches and steers agent runs.
func runRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("runs: want create, get, list, cancel, events, send, approve or reject")
	}
	sub := args[0]
	var prompt, provider, model, apiKey, baseURL, reason string
	var maxSteps int
	var a11y bool
	var after int64
	var record bool
	c, err := newCLI(ctx, "runs "+sub, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		switch sub {
		case "create":
			fs.StringVar(&prompt, "prompt", "", "the task")
			fs.StringVar(&provider, "provider", "anthropic", "anthropic, openai or gemini")
			fs.StringVar(&model, "model", "", "model name (default: the provider's)")
			fs.StringVar(&apiKey, "provider-key", "", "provider key for this run (default: the server's -anthropic-api-key, -openai-api-key or -gemini-api-key)")
			fs.StringVar(&baseURL, "base-url", "", "provider base URL")
			fs.IntVar(&maxSteps, "max-steps", 0, "stop after this many model turns (0: 50)")
			fs.BoolVar(&a11y, "a11y", false, "give the model the screen's accessibility tree as text beside each screenshot")
			fs.BoolVar(&record, "record", false, "record the screen while the run runs (the run's recordingId; deskgrid recordings download)")
		case "events":
			fs.Int64Var(&after, "after", 0, "start after this sequence number")
		case "reject":
			fs.StringVar(&reason, "reason", "rejected by the operator", "told to the model")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	ag := agentv1.NewAgentServiceClient(c.conn)
	runRow := func(m proto.Message) string {
		r := m.(*agentv1.Run)
		return fmt.Sprintf("%s\t%s\t%s\t%s/%s\t%d\t%s", r.GetId(), r.GetSessionId(), lower("RUN_STATE_", r.GetState().String()), r.GetProvider(), r.GetModel(), r.GetSteps(), r.GetStateReason())
	}
	const runHeader = "ID\tSESSION\tSTATE\tMODEL\tSTEPS\tREASON"
	one := func(r *agentv1.Run, err error) error {
		if err != nil {
			return rpcError(err)
		}
		return c.table(runHeader, []proto.Message{r}, runRow)
	}
	switch sub {
	case "create":
		if err := c.want(1, "runs create <session> -prompt TEXT"); err != nil {
			return err
		}
		if prompt == "" {
			return usageError("runs create: -prompt is required")
		}
		req := &agentv1.CreateRunRequest{SessionId: c.pos[0], Prompt: prompt, Provider: provider, Model: model, ApiKey: apiKey, BaseUrl: baseURL, MaxSteps: int32(maxSteps)}
		if record || a11y {
			req.Options = &agentv1.RunOptions{Record: record, AccessibilityTree: a11y}
		}
		resp, err := ag.CreateRun(c.ctx, req)
		return one(resp.GetRun(), err)
	case "get", "cancel":
		if err := c.want(1, "runs "+sub+" <run>"); err != nil {
			return err
		}
		if sub == "get" {
			resp, err := ag.GetRun(c.ctx, &agentv1.GetRunRequest{RunId: c.pos[0]})
			return one(resp.GetRun(), err)
		}
		resp, err := ag.CancelRun(c.ctx, &agentv1.CancelRunRequest{RunId: c.pos[0]})
		return one(resp.GetRun(), err)
	case "list":
		if err := c.want(1, "runs list <session>"); err != nil {
			return err
		}
		resp, err := ag.ListRuns(c.ctx, &agentv1.ListRunsRequest{SessionId: c.pos[0], PageSize: 100})
		if err != nil {
			return rpcError(err)
		}
		return c.table(runHeader, toMsgs(resp.GetRuns()), runRow)
	case "send":
		if len(c.pos) < 2 {
			return usageError("runs send <run> MESSAGE")
		}
		resp, err := ag.SendMessage(c.ctx, &agentv1.SendMessageRequest{RunId: c.pos[0], Text: strings.Join(c.pos[1:], " ")})
		return one(resp.GetRun(), err)
	case "approve":
		if err := c.want(1, "runs approve <run>"); err != nil {
			return err
		}
		resp, err := ag.ApproveStep(c.ctx, &agentv1.ApproveStepRequest{RunId: c.pos[0]})
		return one(resp.GetRun(), err)
	case "reject":
		if err := c.want(1, "runs reject <run>"); err != nil {
			return err
		}
		resp, err := ag.RejectStep(c.ctx, &agentv1.RejectStepRequest{RunId: c.pos[0], Reason: reason})
		return one(resp.GetRun(), err)
	case "events":
		if err := c.want(1, "runs events <run>"); err != nil {
			return err
		}
		st, err := ag.StreamRunEvents(c.ctx, &agentv1.StreamRunEventsRequest{RunId: c.pos[0], AfterSequence: after})
		if err != nil {
			return rpcError(err)
		}
		return receive(st, func(m *agentv1.StreamRunEventsResponse) error {
			if c.cf.output == "json" {
				return c.print(m.GetEvent())
			}
			printRunEvent(stdout, m.GetEvent())
			return nil
		})
	}
	return usageError("runs: unknown subcommand %q", sub)
}

// printRunEvent renders an event as a line of a transcript.
func printRunEvent(w io.Writer, e *agentv1.RunEvent) {
	switch ev := e.GetEvent().(type) {
	case *agentv1.RunEvent_TextDelta:
		fmt.Fprint(w, ev.TextDelta)
	case *agentv1.RunEvent_ThinkingDelta:
	case *agentv1.RunEvent_UserMessage:
		fmt.Fprintf(w, "\n> %s\n", ev.UserMessage)
	case *agentv1.RunEvent_ToolCall:
		tc := ev.ToolCall
		if tc.GetFinished() {
			status := "ok"
			if tc.GetIsError() {
				status = "error: " + tc.GetOutput()
			}
			fmt.Fprintf(w, "\n  [%s done: %s]\n", tc.GetTool(), status)
		} else {
			fmt.Fprintf(w, "\n  [%s %s]", tc.GetTool(), tc.GetInputJson())
		}
	case *agentv1.RunEvent_State:
		fmt.Fprintf(w, "\n-- %s %s\n", lower("RUN_STATE_", ev.State.String()), e.GetReason())
	case *agentv1.RunEvent_Usage:
		fmt.Fprintf(w, "\n  [usage %s]\n", protojson.Format(ev.Usage))
	case *agentv1.RunEvent_Screenshot:
		fmt.Fprint(w, "\n  [screenshot]\n")
	}
}

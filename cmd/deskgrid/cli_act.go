package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// runAct sends one input action to a session's desktop.
func runAct(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "act", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "act <session> click X Y [right|middle] | move X Y | type TEXT | key CHORD | scroll X Y DY"
	if len(c.pos) < 3 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	nums := func(n int) ([]int32, error) {
		if len(a) < n {
			return nil, usageError("%s", usage)
		}
		out := make([]int32, n)
		for i := range out {
			v, err := atoi(a[i])
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	var act *displayv1.Action
	switch verb {
	case "click":
		p, err := nums(2)
		if err != nil {
			return err
		}
		b := displayv1.MouseButton_MOUSE_BUTTON_LEFT
		if len(a) > 2 {
			v, ok := displayv1.MouseButton_value["MOUSE_BUTTON_"+strings.ToUpper(a[2])]
			if !ok {
				return usageError("unknown button %q", a[2])
			}
			b = displayv1.MouseButton(v)
		}
		act = &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: p[0], Y: p[1]}, Button: b, Clicks: 1}}}
	case "move":
		p, err := nums(2)
		if err != nil {
			return err
		}
		act = &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: p[0], Y: p[1]}}}}
	case "type":
		act = &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: strings.Join(a, " ")}}}
	case "key":
		act = &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: strings.Join(a, " ")}}}
	case "scroll":
		p, err := nums(3)
		if err != nil {
			return err
		}
		act = &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: &displayv1.Point{X: p[0], Y: p[1]}, DeltaY: p[2]}}}
	default:
		return usageError("%s", usage)
	}
	resp, err := displayv1.NewDisplayServiceClient(c.conn).PerformActions(c.ctx, &displayv1.PerformActionsRequest{SessionId: id, Actions: []*displayv1.Action{act}})
	if err != nil {
		return rpcError(err)
	}
	if c.cf.output == "json" {
		return c.print(resp)
	}
	switch verb {
	case "type":
		fmt.Fprintf(stdout, "typed %d characters\n", utf8.RuneCountInString(act.GetType().GetText()))
	case "key":
		fmt.Fprintf(stdout, "pressed %s\n", act.GetKey().GetChord())
	default:
		fmt.Fprintf(stdout, "pointer at %d,%d\n", resp.GetCursor().GetX(), resp.GetCursor().GetY())
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// runClipboard reads or sets a session's clipboard: text, or with -png a
// PNG image.
func runClipboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		primary bool
		pngFile string
	)
	c, err := parseCLI("clipboard", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&primary, "primary", false, "the PRIMARY selection (the mouse selection) instead of CLIPBOARD")
		fs.StringVar(&pngFile, "png", "", "an image/png file: get writes the image there (- for standard output), set reads it")
	})
	if err != nil {
		return err
	}
	pos := c.pos
	const want = "clipboard: want <id> [get] [-png FILE] | <id> set TEXT | <id> set -png FILE"
	if len(pos) < 1 || len(pos) > 3 {
		return usageError(want)
	}
	verb := "get"
	if len(pos) > 1 {
		verb = pos[1]
	}
	sel := displayv1.Selection_SELECTION_CLIPBOARD
	if primary {
		sel = displayv1.Selection_SELECTION_PRIMARY
	}
	var set *displayv1.SetClipboardRequest
	switch {
	case verb == "get" && len(pos) <= 2:
	case verb == "set" && pngFile != "" && len(pos) == 2:
		data, err := os.ReadFile(pngFile)
		if err != nil {
			return err
		}
		set = &displayv1.SetClipboardRequest{SessionId: pos[0], Selection: sel, MimeType: "image/png", Data: data}
	case verb == "set" && pngFile == "" && len(pos) == 3:
		set = &displayv1.SetClipboardRequest{SessionId: pos[0], Selection: sel, Text: pos[2]}
	default:
		return usageError(want)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	dc := displayv1.NewDisplayServiceClient(c.conn)
	if set != nil {
		if _, err := dc.SetClipboard(c.ctx, set); err != nil {
			return rpcError(err)
		}
		return nil
	}
	req := &displayv1.GetClipboardRequest{SessionId: pos[0], Selection: sel}
	if pngFile != "" {
		req.MimeType = "image/png"
	}
	resp, err := dc.GetClipboard(c.ctx, req)
	if err != nil {
		return rpcError(err)
	}
	if pngFile == "" {
		_, err = fmt.Fprintln(stdout, resp.GetText())
		return err
	}
	if !resp.GetOwned() {
		return fmt.Errorf("the clipboard of session %s is empty", pos[0])
	}
	if pngFile == "-" {
		_, err = stdout.Write(resp.GetData())
		return err
	}
	return os.WriteFile(pngFile, resp.GetData(), 0o644)
}

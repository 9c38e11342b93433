package display

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/selection"
)

// clipboardTimeout bounds the wait for the program holding a selection to
// hand its text over.
const clipboardTimeout = 5 * time.Second

func selectionOf(sel displayv1.Selection) (selection.Name, error) {
	switch sel {
	case displayv1.Selection_SELECTION_UNSPECIFIED, displayv1.Selection_SELECTION_CLIPBOARD:
		return selection.Clipboard, nil
	case displayv1.Selection_SELECTION_PRIMARY:
		return selection.Primary, nil
	}
	return 0, invalidf("unknown selection %v", sel)
}

const mimeText = "text/plain"

// pngSignature starts every PNG file.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// mimeOf checks a clipboard request's MIME type: text or PNG.
func mimeOf(m string) (image bool, err error) {
	switch m {
	case "", mimeText, "text/plain;charset=utf-8":
		return false, nil
	case selection.PNG:
		return true, nil
	}
	return false, invalidf("mime_type %q: the clipboard takes %q or %q", m, mimeText, selection.PNG)
}

// GetClipboard reads a selection's text, or PNG image, from the program
// that holds it.
func (s *Service) GetClipboard(ctx context.Context, req *displayv1.GetClipboardRequest) (*displayv1.GetClipboardResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	name, err := selectionOf(req.GetSelection())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	image, err := mimeOf(req.GetMimeType())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := d.usable(); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	wctx, cancel := context.WithTimeout(ctx, clipboardTimeout)
	defer cancel()
	defer context.AfterFunc(d.done, cancel)()
	if image {
		img, err := d.selections.GetImage(wctx, name)
		switch {
		case errors.Is(err, selection.ErrNoImage):
			return nil, s.toStatus(ctx, fmt.Errorf("the program holding %s of session %s offers no image/png (text, say): %w", name, d.sessionID, errNoText))
		case errors.Is(err, selection.ErrTooLarge):
			return nil, s.toStatus(ctx, fmt.Errorf("the image in %s of session %s is larger than %d bytes (8 MiB): %w", name, d.sessionID, selection.MaxImageBytes, errTooLarge))
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return nil, s.toStatus(ctx, fmt.Errorf("the program holding %s of session %s did not hand its image over within %v: %w", name, d.sessionID, clipboardTimeout, errUnresponsive))
		case err != nil:
			return nil, s.toStatus(ctx, d.explain(err))
		}
		return &displayv1.GetClipboardResponse{Data: img, Owned: img != nil, MimeType: selection.PNG}, nil
	}
	t, err := d.selections.Get(wctx, name)
	switch {
	case errors.Is(err, selection.ErrNoText):
		return nil, s.toStatus(ctx, fmt.Errorf("the program holding %s of session %s offers no text (an image or files, say; ask for mime_type image/png): %w", name, d.sessionID, errNoText))
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, s.toStatus(ctx, fmt.Errorf("the program holding %s of session %s did not hand its text over within %v: %w", name, d.sessionID, clipboardTimeout, errUnresponsive))
	case err != nil:
		return nil, s.toStatus(ctx, d.explain(err))
	}
	return &displayv1.GetClipboardResponse{Text: t.Text, Owned: t.Owned, Truncated: t.Truncated, MimeType: mimeText}, nil
}

// SetClipboard makes the service the owner of a selection holding text.
func (s *Service) SetClipboard(ctx context.Context, req *displayv1.SetClipboardRequest) (*displayv1.SetClipboardResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	name, err := selectionOf(req.GetSelection())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	image, err := mimeOf(req.GetMimeType())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	text := req.GetText()
	if image {
		data := req.GetData()
		switch {
		case text != "":
			return nil, s.toStatus(ctx, invalidf("mime_type image/png takes the image in data, not text"))
		case len(data) > selection.MaxImageBytes:
			return nil, s.toStatus(ctx, invalidf("the image is %d bytes; the clipboard takes at most %d (8 MiB)", len(data), selection.MaxImageBytes))
		case !bytes.HasPrefix(data, pngSignature):
			return nil, s.toStatus(ctx, invalidf("data is not a PNG image (no PNG signature)"))
		}
	} else if len(req.GetData()) > 0 {
		return nil, s.toStatus(ctx, invalidf("data is for mime_type image/png; text goes in text"))
	}
	if len(text) > selection.MaxBytes {
		return nil, s.toStatus(ctx, invalidf("text is %d bytes; the clipboard takes at most %d (1 MiB)", len(text), selection.MaxBytes))
	}
	if !utf8.ValidString(text) {
		return nil, s.toStatus(ctx, invalidf("text is not valid UTF-8"))
	}
	if req.GetLeaseToken() < 0 {
		return nil, s.toStatus(ctx, invalidf("lease_token %d is negative", req.GetLeaseToken()))
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	set := func(ctx context.Context) error { return d.selections.Set(ctx, name, text) }
	if image {
		set = func(ctx context.Context) error { return d.selections.SetImage(ctx, name, req.GetData()) }
	}
	if err := d.setClipboard(ctx, set, req.GetLeaseToken()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &displayv1.SetClipboardResponse{}, nil
}

// setClipboard offers text or an image on a selection (set does), as input
// under the lease.
func (d *display) setClipboard(ctx context.Context, set func(context.Context) error, token int64) error {
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if err := d.usable(); err != nil {
		return err
	}
	if err := d.fence(token); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, clipboardTimeout)
	defer cancel()
	defer context.AfterFunc(d.done, cancel)()
	if err := set(wctx); err != nil {
		if errors.Is(err, selection.ErrNotOwned) {
			return fmt.Errorf("session %s: %w: %w", d.sessionID, errUnresponsive, err)
		}
		return d.explain(err)
	}
	return nil
}

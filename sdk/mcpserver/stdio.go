package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// ServeStdio serves the tools on standard input and output until ctx ends or
// the host closes the stream; the requests read before the stream's end are
// answered first.
func ServeStdio(ctx context.Context, c *deskgrid.Client, apiKey, version string) error {
	return serveIO(ctx, New(c, apiKey, version), os.Stdin, os.Stdout)
}

// serveIO serves srv on newline-delimited JSON-RPC over in and out.
func serveIO(ctx context.Context, srv *mcp.Server, in io.Reader, out io.Writer) error {
	d := newDrain(ctx, in, out)
	return srv.Run(ctx, &mcp.IOTransport{Reader: d, Writer: drainWriter{d}})
}

// drain holds back the end of a host's input until every request read
// before it has been answered (or cancelled, or the output failed): a host
// that writes its requests and closes its end, as a shell pipe does, gets
// its answers, where the connection would otherwise close at once and drop
// them.
type drain struct {
	ctx context.Context
	in  io.Reader
	out io.Writer

	mu      sync.Mutex
	pending map[string]bool
	broken  bool
	changed chan struct{}
	// Partial lines not yet scanned.
	inLine, outLine []byte
}

func newDrain(ctx context.Context, in io.Reader, out io.Writer) *drain {
	return &drain{ctx: ctx, in: in, out: out, pending: map[string]bool{}, changed: make(chan struct{})}
}

// message is what drain reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

func (d *drain) Read(p []byte) (int, error) {
	n, err := d.in.Read(p)
	d.mu.Lock()
	d.inLine = lines(d.inLine, p[:n], func(m message) {
		switch {
		case m.Method == "notifications/cancelled":
			delete(d.pending, idKey(m.Params.RequestID))
		case m.Method != "" && idKey(m.ID) != "":
			d.pending[idKey(m.ID)] = true
		}
	})
	d.mu.Unlock()
	if err == io.EOF {
		d.wait()
	}
	return n, err
}

func (d *drain) Close() error {
	if c, ok := d.in.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// wait returns once nothing read is left unanswered, or ctx ends.
func (d *drain) wait() {
	for {
		d.mu.Lock()
		done, changed := len(d.pending) == 0 || d.broken, d.changed
		d.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-d.ctx.Done():
			return
		}
	}
}

// drainWriter is the output side of a drain: it notes the answers written.
type drainWriter struct{ d *drain }

func (w drainWriter) Write(p []byte) (int, error) {
	d := w.d
	n, err := d.out.Write(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.broken = true
	}
	d.outLine = lines(d.outLine, p[:n], func(m message) {
		if m.Method == "" {
			delete(d.pending, idKey(m.ID))
		}
	})
	close(d.changed)
	d.changed = make(chan struct{})
	return n, err
}

func (drainWriter) Close() error { return nil }

// lines appends p to partial, calls f with each whole line's message (each
// of a batch's), and returns what is left of a line not yet ended.
func lines(partial, p []byte, f func(message)) []byte {
	partial = append(partial, p...)
	for {
		i := bytes.IndexByte(partial, '\n')
		if i < 0 {
			return partial
		}
		line := bytes.TrimSpace(partial[:i])
		partial = partial[i+1:]
		var one message
		var batch []message
		switch {
		case json.Unmarshal(line, &one) == nil:
			f(one)
		case json.Unmarshal(line, &batch) == nil:
			for _, m := range batch {
				f(m)
			}
		}
	}
}

// idKey is a request id as a map key; "" for none (a notification).
func idKey(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) == 0 || string(id) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

// runHistory reads, searches, exports and imports what sessions did.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("history: want list, search, export, import or delete")
	}
	sub := args[0]
	var limit int
	c, err := newCLI(ctx, "history "+sub, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&limit, "limit", 100, "entries per page")
	})
	if err != nil {
		return err
	}
	defer c.close()
	hc := historyv1.NewHistoryServiceClient(c.conn)
	entryRow := func(m proto.Message) string {
		e := m.(*historyv1.Entry)
		return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", e.GetSequence(), e.GetTime().AsTime().Format(time.RFC3339), lower("ENTRY_KIND_", e.GetKind().String()), e.GetType(), e.GetRunId())
	}
	const header = "SEQ\tTIME\tKIND\tTYPE\tRUN"
	switch sub {
	case "list":
		if err := c.want(1, "history list <session>"); err != nil {
			return err
		}
		req := &historyv1.ListSessionHistoryRequest{SessionId: c.pos[0], PageSize: int32(limit)}
		var all []*historyv1.Entry
		for {
			resp, err := hc.ListSessionHistory(c.ctx, req)
			if err != nil {
				return rpcError(err)
			}
			all = append(all, resp.GetEntries()...)
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		return c.table(header, toMsgs(all), entryRow)
	case "search":
		if len(c.pos) < 1 {
			return usageError("history search WORDS...")
		}
		resp, err := hc.SearchHistory(c.ctx, &historyv1.SearchHistoryRequest{Query: strings.Join(c.pos, " "), PageSize: int32(limit)})
		if err != nil {
			return rpcError(err)
		}
		return c.table("SESSION\t"+header, toMsgs(resp.GetEntries()), func(m proto.Message) string {
			return m.(*historyv1.Entry).GetSessionId() + "\t" + entryRow(m)
		})
	case "export":
		if err := c.want(1, "history export <session> > file.jsonl"); err != nil {
			return err
		}
		st, err := hc.ExportSessionHistory(c.ctx, &historyv1.ExportSessionHistoryRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		var n int
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				fmt.Fprintf(stderr, "exported %d bytes\n", n)
				return nil
			}
			if err != nil {
				return rpcError(err)
			}
			k, err := stdout.Write(m.GetChunk())
			if err != nil {
				return err
			}
			n += k
		}
	case "import":
		if err := c.want(1, "history import <session> < file.jsonl"); err != nil {
			return err
		}
		st, err := hc.ImportSessionHistory(c.ctx)
		if err != nil {
			return rpcError(err)
		}
		buf := make([]byte, 256<<10)
		first := true
		for {
			n, rerr := os.Stdin.Read(buf)
			if n > 0 || first {
				req := &historyv1.ImportSessionHistoryRequest{Chunk: append([]byte(nil), buf[:n]...)}
				if first {
					req.SessionId, first = c.pos[0], false
				}
				if err := st.Send(req); err != nil {
					_, cerr := st.CloseAndRecv()
					return rpcError(errors.Join(err, cerr))
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		resp, err := st.CloseAndRecv()
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	case "delete":
		if err := c.want(1, "history delete <session>"); err != nil {
			return err
		}
		resp, err := hc.DeleteSessionHistory(c.ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	}
	return usageError("history: unknown subcommand %q", sub)
}

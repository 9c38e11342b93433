package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

const recordingsUsage = "recordings start <id> [-fps N] [-format mp4|webm] [-size WxH] | stop <id> <recording> | list <id> | get <id> <recording> | download <id> <recording> [-out FILE]"

// runRecordings records sessions' screens to videos and fetches them.
func runRecordings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("%s", recordingsUsage)
	}
	sub := args[0]
	var (
		fps          int
		format, size string
		out          string
	)
	c, err := newCLI(ctx, "recordings "+sub, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		switch sub {
		case "start":
			fs.IntVar(&fps, "fps", 0, "most frames a second, 1-30 (0: 5); frames are taken only when the screen changes")
			fs.StringVar(&format, "format", "mp4", "mp4 (H.264) or webm (VP9)")
			fs.StringVar(&size, "size", "", "video size WxH, each side 16-1920 (default: the screen's, fitted in 1920x1920)")
		case "download":
			fs.StringVar(&out, "out", "", "file to write, - for standard output (default: <recording>.mp4 or .webm)")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	dc := displayv1.NewDisplayServiceClient(c.conn)
	hc := historyv1.NewHistoryServiceClient(c.conn)
	row := func(m proto.Message) string {
		r := m.(*displayv1.Recording)
		end := ""
		if r.GetEndTime() != nil {
			end = r.GetEndTime().AsTime().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s\t%s\t%s\t%dx%d\t%d\t%d\t%s\t%s\t%s", r.GetId(), lower("RECORDING_STATE_", r.GetState().String()),
			lower("RECORDING_FORMAT_", r.GetFormat().String()), r.GetWidth(), r.GetHeight(), r.GetFrames(), r.GetSizeBytes(),
			r.GetStartTime().AsTime().Format(time.RFC3339), end, r.GetFailureReason())
	}
	const header = "ID\tSTATE\tFORMAT\tSIZE\tFRAMES\tBYTES\tSTARTED\tENDED\tREASON"
	switch sub {
	case "start":
		if err := c.want(1, "recordings start <id>"); err != nil {
			return err
		}
		req := &displayv1.StartRecordingRequest{SessionId: c.pos[0], Fps: int32(fps)}
		switch strings.ToLower(format) {
		case "mp4", "":
			req.Format = displayv1.RecordingFormat_RECORDING_FORMAT_MP4
		case "webm":
			req.Format = displayv1.RecordingFormat_RECORDING_FORMAT_WEBM
		default:
			return usageError("-format %q: want mp4 or webm", format)
		}
		if size != "" {
			w, h, ok := strings.Cut(strings.ToLower(size), "x")
			wi, werr := strconv.Atoi(w)
			hi, herr := strconv.Atoi(h)
			if !ok || werr != nil || herr != nil {
				return usageError("-size %q: want WxH, such as 1280x720", size)
			}
			req.Size = &displayv1.Size{Width: int32(wi), Height: int32(hi)}
		}
		resp, err := dc.StartRecording(c.ctx, req)
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, []proto.Message{resp.GetRecording()}, row)
	case "stop":
		if err := c.want(2, "recordings stop <id> <recording>"); err != nil {
			return err
		}
		resp, err := dc.StopRecording(c.ctx, &displayv1.StopRecordingRequest{SessionId: c.pos[0], RecordingId: c.pos[1]})
		if err != nil {
			return rpcError(err)
		}
		// Returns once the history has stored the end too, so a download
		// right after finds the video.
		rec, err := waitRecordingEnd(c.ctx, hc, c.pos[0], c.pos[1])
		if err != nil {
			rec = resp.GetRecording()
		}
		return c.table(header, []proto.Message{rec}, row)
	case "list":
		if err := c.want(1, "recordings list <id>"); err != nil {
			return err
		}
		resp, err := hc.ListRecordings(c.ctx, &historyv1.ListRecordingsRequest{SessionId: c.pos[0]})
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, toMsgs(resp.GetRecordings()), row)
	case "get":
		if err := c.want(2, "recordings get <id> <recording>"); err != nil {
			return err
		}
		resp, err := hc.GetRecording(c.ctx, &historyv1.GetRecordingRequest{SessionId: c.pos[0], RecordingId: c.pos[1]})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp.GetRecording())
	case "download":
		if err := c.want(2, "recordings download <id> <recording>"); err != nil {
			return err
		}
		return downloadRecording(c, hc, c.pos[0], c.pos[1], out, stderr)
	}
	return usageError("recordings: unknown subcommand %q", sub)
}

// downloadRecording writes a recording's video to a file (beside it, then
// renamed, so no reader sees half a video). A video stopped moments ago and
// not yet stored by the history is waited for, within -timeout.
func downloadRecording(c *cli, hc historyv1.HistoryServiceClient, sessionID, id, out string, stderr io.Writer) error {
	for {
		st, err := hc.DownloadRecording(c.ctx, &historyv1.DownloadRecordingRequest{SessionId: sessionID, RecordingId: id})
		if err != nil {
			return rpcError(err)
		}
		first, err := st.Recv()
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "not stored yet") {
			select {
			case <-c.ctx.Done():
				return rpcError(err)
			case <-time.After(200 * time.Millisecond):
				continue
			}
		}
		if err != nil {
			return rpcError(err)
		}
		if out == "" {
			out = id + ".mp4"
			if first.GetContentType() == "video/webm" {
				out = id + ".webm"
			}
		}
		var w io.Writer = c.out
		var f *os.File
		if out != "-" {
			if f, err = os.Create(out + ".part"); err != nil {
				return err
			}
			defer os.Remove(out + ".part")
			defer f.Close()
			w = f
		}
		n := int64(0)
		for m := first; ; {
			k, err := w.Write(m.GetChunk())
			n += int64(k)
			if err != nil {
				return err
			}
			if m, err = st.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return rpcError(err)
			}
		}
		if n != first.GetSizeBytes() {
			return fmt.Errorf("download of %s cut short: %d of %d bytes", id, n, first.GetSizeBytes())
		}
		if f != nil {
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(out+".part", out); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "wrote %s (%d bytes, %s)\n", out, n, first.GetContentType())
		}
		return nil
	}
}

// waitRecordingEnd waits until the history holds a stopped recording's end
// (the node has published it; the history stores it moments later).
func waitRecordingEnd(ctx context.Context, hc historyv1.HistoryServiceClient, sessionID, id string) (*displayv1.Recording, error) {
	for {
		resp, err := hc.GetRecording(ctx, &historyv1.GetRecordingRequest{SessionId: sessionID, RecordingId: id})
		if err == nil && resp.GetRecording().GetState() != displayv1.RecordingState_RECORDING_STATE_RECORDING {
			return resp.GetRecording(), nil
		}
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

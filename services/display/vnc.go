package display

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/rfb"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

// vncChunk is the most RFB bytes one response message carries.
const vncChunk = 64 << 10

// ConnectVNC relays one viewer's RFB connection to the session's VNC
// server. The server listens only on a unix socket in the session's
// private directory; view-only is enforced here, message by message,
// because the server itself cannot tell viewers apart.
func (s *Service) ConnectVNC(stream displayv1.DisplayService_ConnectVNCServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "the first message must name the session")
		}
		return err
	}
	if err := validateSessionID(first.GetSessionId()); err != nil {
		return s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, first.GetSessionId())
	if err != nil {
		return s.toStatus(ctx, err)
	}
	if !xserver.IsVNC(s.cfg.XvfbPath) {
		return status.Errorf(codes.FailedPrecondition,
			"this node's X server %s has no VNC server; run the display service with Xtigervnc", s.cfg.XvfbPath)
	}
	if err := d.usable(); err != nil {
		return s.toStatus(ctx, err)
	}
	conn, err := dialUnix(filepath.Join(d.dir, vncSocket))
	if err != nil {
		if d.stopping.Load() {
			return s.toStatus(ctx, d.explain(err))
		}
		return s.toStatus(ctx, fmt.Errorf("connect to the VNC server of session %s: %w", d.sessionID, err))
	}
	defer conn.Close()

	// Deleting the display, or the viewer leaving, ends the relay.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.done, cancel)()
	stopClose := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopClose()

	viewers := d.viewers.Add(1)
	defer d.viewers.Add(-1)
	s.log.InfoContext(ctx, "VNC viewer connected", "session_id", d.sessionID,
		"view_only", first.GetViewOnly(), "viewers", viewers)
	defer s.log.InfoContext(ctx, "VNC viewer left", "session_id", d.sessionID)

	var (
		mu       sync.Mutex
		protoErr error
	)
	// Viewer to server. Recv may run beside Send; this goroutine ends when
	// the stream does, at the latest when this handler returns.
	go func() {
		f := &rfb.Filter{ViewOnly: first.GetViewOnly()}
		if d.watch != nil {
			// The viewer's input changes the screen as an agent's does.
			f.OnInput = func() { d.watch.NoteInput(time.Now()) }
		}
		data := first.GetData()
		for {
			if len(data) > 0 {
				out, ferr := f.Feed(data)
				if len(out) > 0 {
					if _, err := conn.Write(out); err != nil {
						cancel()
						return
					}
				}
				if ferr != nil {
					mu.Lock()
					protoErr = ferr
					mu.Unlock()
					cancel()
					return
				}
			}
			m, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					// The viewer is done sending; the server closes in turn.
					_ = conn.CloseWrite()
					return
				}
				cancel()
				return
			}
			data = m.GetData()
		}
	}()

	// Server to viewer, here: Send must not outlive the handler.
	buf := make([]byte, vncChunk)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if err := stream.Send(&displayv1.ConnectVNCResponse{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}
		if rerr != nil {
			break
		}
	}
	mu.Lock()
	perr := protoErr
	mu.Unlock()
	switch {
	case perr != nil:
		return status.Errorf(codes.InvalidArgument, "VNC viewer: %v", perr)
	case d.stopping.Load():
		return status.Errorf(codes.NotFound, "the display of session %s was deleted", d.sessionID)
	case stream.Context().Err() != nil:
		return status.FromContextError(stream.Context().Err()).Err()
	}
	return nil
}

// dialUnix connects to a unix socket whose path may be longer than the
// 107 bytes sockaddr_un holds, by naming its directory through an open
// file descriptor.
func dialUnix(path string) (*net.UnixConn, error) {
	if len(path) < 100 {
		return net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	}
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	short := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + filepath.Base(path)
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: short, Net: "unix"})
}

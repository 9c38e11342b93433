package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// vncDisplay is a display service whose ConnectVNC behaves as the node's
// does: the first message names the session, an unknown one is NotFound
// before any byte, then RFB bytes are relayed both ways to a VNC server (here
// an in-process RFB server on a pipe), and deleting the display ends the
// relay with NotFound.
type vncDisplay struct {
	display

	fb fakeFramebuffer
	// upstream maps a session to a real VNC server's unix socket; other
	// sessions get the in-process RFB server.
	upstream map[string]string

	mu       sync.Mutex
	firsts   []*displayv1.ConnectVNCRequest
	callers  []auth.Principal // who opened each ConnectVNC (with auth on)
	servers  map[string][]*rfbServer
	deleted  map[string]chan struct{}
	firstSig chan struct{}
	ended    chan string // session id of each ConnectVNC that returned

	// flood and sink are the sessions of the backpressure tests.
	floodTotal int64
	floodSent  atomic.Int64
	sinkGot    atomic.Int64
	sinkGo     chan struct{}
}

func newVNCDisplay(fb fakeFramebuffer) *vncDisplay {
	return &vncDisplay{
		fb:       fb,
		upstream: map[string]string{},
		servers:  map[string][]*rfbServer{},
		deleted:  map[string]chan struct{}{"s-1": make(chan struct{})},
		firstSig: make(chan struct{}, 100),
		ended:    make(chan string, 100),
		sinkGo:   make(chan struct{}),
	}
}

// addDisplay gives a new session a desktop.
func (d *vncDisplay) addDisplay(sessionID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleted[sessionID] = make(chan struct{})
}

// deleteDisplay ends every viewer of the session as deleting a display does.
func (d *vncDisplay) deleteDisplay(sessionID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gone, ok := d.deleted[sessionID]; ok {
		close(gone)
		delete(d.deleted, sessionID)
	}
}

func (d *vncDisplay) lastFirst() *displayv1.ConnectVNCRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.firsts[len(d.firsts)-1]
}

func (d *vncDisplay) server(sessionID string) *rfbServer {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.servers[sessionID]
	return s[len(s)-1]
}

func (d *vncDisplay) ConnectVNC(stream displayv1.DisplayService_ConnectVNCServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "the first message must name the session")
		}
		return err
	}
	id := first.GetSessionId()
	defer func() { d.ended <- id }()
	d.mu.Lock()
	d.firsts = append(d.firsts, first)
	p, _ := auth.FromContext(stream.Context())
	d.callers = append(d.callers, p)
	gone, ok := d.deleted[id]
	sock, isReal := d.upstream[id]
	d.mu.Unlock()
	d.firstSig <- struct{}{}
	switch id {
	case "flood":
		return d.flood(stream)
	case "sink":
		return d.sink(stream)
	case "silent": // a VNC server that never speaks
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	if !ok && !isReal {
		return status.Errorf(codes.NotFound, "no display for session %s", id)
	}

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var viewer net.Conn
	if isReal {
		if viewer, err = net.Dial("unix", sock); err != nil {
			return status.Errorf(codes.Unavailable, "connect to the VNC server of session %s: %v", id, err)
		}
		defer viewer.Close()
	} else {
		var vncSide net.Conn
		viewer, vncSide = net.Pipe()
		srv := &rfbServer{fb: d.fb, got: make(chan rfbMessage, 1000)}
		d.mu.Lock()
		d.servers[id] = append(d.servers[id], srv)
		d.mu.Unlock()
		go func() {
			_ = srv.serve(vncSide)
			vncSide.Close()
		}()
	}
	defer context.AfterFunc(ctx, func() { viewer.Close() })()
	go func() {
		select {
		case <-gone:
			viewer.Close()
		case <-ctx.Done():
		}
	}()
	go func() {
		data := first.GetData()
		for {
			if len(data) > 0 {
				if _, err := viewer.Write(data); err != nil {
					cancel()
					return
				}
			}
			m, err := stream.Recv()
			if err != nil {
				cancel()
				return
			}
			data = m.GetData()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, rerr := viewer.Read(buf)
		if n > 0 {
			if err := stream.Send(&displayv1.ConnectVNCResponse{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}
		if rerr != nil {
			break
		}
	}
	select {
	case <-gone:
		return status.Errorf(codes.NotFound, "the display of session %s was deleted", id)
	default:
	}
	if err := stream.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// flood sends a counted byte pattern as fast as the stream takes it.
func (d *vncDisplay) flood(stream displayv1.DisplayService_ConnectVNCServer) error {
	chunk := make([]byte, 32<<10)
	for sent := int64(0); sent < d.floodTotal; {
		for i := range chunk {
			chunk[i] = byte((sent + int64(i)) % 251)
		}
		if err := stream.Send(&displayv1.ConnectVNCResponse{Data: chunk}); err != nil {
			return err
		}
		sent += int64(len(chunk))
		d.floodSent.Store(sent)
	}
	return nil
}

// sink greets (a VNC server speaks first), then reads nothing until told.
func (d *vncDisplay) sink(stream displayv1.DisplayService_ConnectVNCServer) error {
	if err := stream.Send(&displayv1.ConnectVNCResponse{Data: []byte("RFB 003.008\n")}); err != nil {
		return err
	}
	select {
	case <-d.sinkGo:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		d.sinkGot.Add(int64(len(m.GetData())))
	}
}

// fakeFramebuffer is the one picture the fake RFB server shows: a single colour.
type fakeFramebuffer struct {
	Width, Height int
	R, G, B       uint8
	Name          string
}

// rfbMessage is one client-to-server RFB message the fake received.
type rfbMessage struct {
	Type byte
	Body []byte
}

// rfbServer speaks the server side of RFB 3.8 (RFC 6143) with security type
// None and Raw encoding: the handshake, and one full framebuffer update on
// the first update request. It decodes every message a viewer may send
// unasked, so a misframed byte anywhere fails the handshake or the parse.
type rfbServer struct {
	fb  fakeFramebuffer
	got chan rfbMessage
}

type pixelFormat struct {
	bpp, depth, bigEndian, trueColour byte
	rMax, gMax, bMax                  uint16
	rShift, gShift, bShift            byte
}

func (pf pixelFormat) bytes() []byte {
	b := make([]byte, 16)
	b[0], b[1], b[2], b[3] = pf.bpp, pf.depth, pf.bigEndian, pf.trueColour
	binary.BigEndian.PutUint16(b[4:], pf.rMax)
	binary.BigEndian.PutUint16(b[6:], pf.gMax)
	binary.BigEndian.PutUint16(b[8:], pf.bMax)
	b[10], b[11], b[12] = pf.rShift, pf.gShift, pf.bShift
	return b
}

func parsePixelFormat(b []byte) pixelFormat {
	return pixelFormat{
		bpp: b[0], depth: b[1], bigEndian: b[2], trueColour: b[3],
		rMax: binary.BigEndian.Uint16(b[4:]), gMax: binary.BigEndian.Uint16(b[6:]), bMax: binary.BigEndian.Uint16(b[8:]),
		rShift: b[10], gShift: b[11], bShift: b[12],
	}
}

func (pf pixelFormat) encode(r, g, b uint8) ([]byte, error) {
	if pf.trueColour == 0 || (pf.bpp != 8 && pf.bpp != 16 && pf.bpp != 32) {
		return nil, fmt.Errorf("pixel format %+v is not supported by the fake", pf)
	}
	v := uint32(r)*uint32(pf.rMax)/255<<pf.rShift | uint32(g)*uint32(pf.gMax)/255<<pf.gShift | uint32(b)*uint32(pf.bMax)/255<<pf.bShift
	out := make([]byte, pf.bpp/8)
	switch {
	case pf.bpp == 8:
		out[0] = byte(v)
	case pf.bpp == 16 && pf.bigEndian != 0:
		binary.BigEndian.PutUint16(out, uint16(v))
	case pf.bpp == 16:
		binary.LittleEndian.PutUint16(out, uint16(v))
	case pf.bigEndian != 0:
		binary.BigEndian.PutUint32(out, v)
	default:
		binary.LittleEndian.PutUint32(out, v)
	}
	return out, nil
}

func (s *rfbServer) serve(c io.ReadWriter) error {
	if _, err := io.WriteString(c, "RFB 003.008\n"); err != nil {
		return err
	}
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return err
	}
	if string(version) != "RFB 003.008\n" {
		return fmt.Errorf("client version %q", version)
	}
	if _, err := c.Write([]byte{1, 1}); err != nil { // one security type: None
		return err
	}
	choice := make([]byte, 1)
	if _, err := io.ReadFull(c, choice); err != nil {
		return err
	}
	if choice[0] != 1 {
		return fmt.Errorf("client chose security type %d", choice[0])
	}
	if _, err := c.Write([]byte{0, 0, 0, 0}); err != nil { // SecurityResult OK
		return err
	}
	if _, err := io.ReadFull(c, choice); err != nil { // ClientInit shared flag
		return err
	}
	pf := pixelFormat{bpp: 32, depth: 24, trueColour: 1, rMax: 255, gMax: 255, bMax: 255, rShift: 16, gShift: 8}
	init := binary.BigEndian.AppendUint16(nil, uint16(s.fb.Width))
	init = binary.BigEndian.AppendUint16(init, uint16(s.fb.Height))
	init = append(init, pf.bytes()...)
	init = binary.BigEndian.AppendUint32(init, uint32(len(s.fb.Name)))
	init = append(init, s.fb.Name...)
	if _, err := c.Write(init); err != nil {
		return err
	}

	sent := false
	for {
		typ := make([]byte, 1)
		if _, err := io.ReadFull(c, typ); err != nil {
			return err
		}
		var body []byte
		read := func(n int) error {
			b := make([]byte, n)
			if _, err := io.ReadFull(c, b); err != nil {
				return err
			}
			body = append(body, b...)
			return nil
		}
		var err error
		switch typ[0] {
		case 0: // SetPixelFormat
			if err = read(19); err == nil {
				pf = parsePixelFormat(body[3:])
			}
		case 2: // SetEncodings
			if err = read(3); err == nil {
				err = read(4 * int(binary.BigEndian.Uint16(body[1:])))
			}
		case 3: // FramebufferUpdateRequest
			if err = read(9); err == nil && !sent {
				err = s.sendFramebuffer(c, pf)
				sent = true
			}
		case 4: // KeyEvent
			err = read(7)
		case 5: // PointerEvent
			err = read(5)
		case 6: // ClientCutText
			if err = read(7); err == nil {
				err = read(int(binary.BigEndian.Uint32(body[3:])))
			}
		default:
			return fmt.Errorf("unexpected client message type %d", typ[0])
		}
		if err != nil {
			return err
		}
		select {
		case s.got <- rfbMessage{Type: typ[0], Body: body}:
		default: // a viewer asking for updates forever must not block the fake
		}
	}
}

func (s *rfbServer) sendFramebuffer(c io.Writer, pf pixelFormat) error {
	px, err := pf.encode(s.fb.R, s.fb.G, s.fb.B)
	if err != nil {
		return err
	}
	msg := []byte{0, 0, 0, 1} // FramebufferUpdate, one rectangle
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, uint16(s.fb.Width))
	msg = binary.BigEndian.AppendUint16(msg, uint16(s.fb.Height))
	msg = binary.BigEndian.AppendUint32(msg, 0) // Raw
	for range s.fb.Width * s.fb.Height {
		msg = append(msg, px...)
	}
	_, err = c.Write(msg)
	return err
}

// sessions is an in-memory session service: records with a generation that
// grows on every change, and watchers that see each change.
type sessions struct {
	sessionv1.UnimplementedSessionServiceServer
	mu      sync.Mutex
	byID    map[string]*sessionv1.Session
	next    int
	changed chan struct{}
	created []*sessionv1.CreateSessionRequest
	// onCreate gives a new session its display; onDelete takes it away.
	onCreate, onDelete func(id string)
	history            *fakeHistory
}

func newSessions(ids ...string) *sessions {
	s := &sessions{byID: map[string]*sessionv1.Session{}, next: len(ids) + 1, changed: make(chan struct{})}
	for _, id := range ids {
		s.byID[id] = s.newSession(id, &sessionv1.CreateSessionRequest{})
	}
	return s
}

func (s *sessions) newSession(id string, r *sessionv1.CreateSessionRequest) *sessionv1.Session {
	w, h := int32(320), int32(200)
	d := &sessionv1.DisplaySpec{Width: &w, Height: &h}
	if r.GetDisplay() != nil {
		d = proto.Clone(r.GetDisplay()).(*sessionv1.DisplaySpec)
	}
	now := time.Now()
	x := &sessionv1.Session{Id: id, State: sessionv1.SessionState_SESSION_STATE_RUNNING, Tenant: "default",
		Display: d, Limits: r.GetLimits(), Labels: r.GetLabels(), Autostart: r.GetAutostart(),
		Ttl: r.GetTtl(), IdleTimeout: r.GetIdleTimeout(), NodeId: "node-1", XDisplay: ":101",
		CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now), LastActiveTime: timestamppb.New(now), Generation: 1}
	if ttl := r.GetTtl(); ttl != nil && ttl.AsDuration() > 0 {
		x.ExpireTime = timestamppb.New(now.Add(ttl.AsDuration()))
	}
	return x
}

// bump records a change: watchers wake and see the new generation.
func (s *sessions) bump(x *sessionv1.Session) {
	x.Generation++
	x.UpdateTime = timestamppb.Now()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *sessions) CreateSession(_ context.Context, r *sessionv1.CreateSessionRequest) (*sessionv1.CreateSessionResponse, error) {
	if d := r.GetDisplay(); d != nil && ((d.Width != nil && (d.GetWidth() < 64 || d.GetWidth() > 7680)) || (d.Height != nil && (d.GetHeight() < 64 || d.GetHeight() > 4320))) {
		return nil, status.Error(codes.InvalidArgument, "display width must be 64 to 7680 and height 64 to 4320")
	}
	s.mu.Lock()
	id := fmt.Sprintf("s-%d", s.next)
	s.next++
	s.created = append(s.created, r)
	x := s.newSession(id, r)
	s.byID[id] = x
	reply := proto.Clone(x).(*sessionv1.Session)
	onCreate, h := s.onCreate, s.history
	s.mu.Unlock()
	if onCreate != nil {
		onCreate(id)
	}
	if h != nil {
		h.recordSession(reply)
	}
	return &sessionv1.CreateSessionResponse{Session: reply}, nil
}

func (s *sessions) lastCreated() *sessionv1.CreateSessionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.created) == 0 {
		return nil
	}
	return s.created[len(s.created)-1]
}

func (s *sessions) GetSession(ctx context.Context, r *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another tenant's session is as unknown as a missing one.
	if x, ok := s.byID[r.GetSessionId()]; ok && ownedBy(ctx, x) {
		return &sessionv1.GetSessionResponse{Session: proto.Clone(x).(*sessionv1.Session)}, nil
	}
	return nil, status.Errorf(codes.NotFound, "session %s not found", r.GetSessionId())
}

func (s *sessions) ListSessions(ctx context.Context, _ *sessionv1.ListSessionsRequest) (*sessionv1.ListSessionsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sessionv1.Session
	for _, x := range s.byID {
		if ownedBy(ctx, x) {
			out = append(out, proto.Clone(x).(*sessionv1.Session))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return &sessionv1.ListSessionsResponse{Sessions: out}, nil
}

func (s *sessions) DeleteSession(_ context.Context, r *sessionv1.DeleteSessionRequest) (*sessionv1.DeleteSessionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.byID[r.GetSessionId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "session %s not found", r.GetSessionId())
	}
	delete(s.byID, r.GetSessionId())
	x.State = sessionv1.SessionState_SESSION_STATE_STOPPED
	x.StateReason = "deleted"
	s.bump(x)
	if s.onDelete != nil {
		s.onDelete(x.GetId())
	}
	return &sessionv1.DeleteSessionResponse{Session: proto.Clone(x).(*sessionv1.Session)}, nil
}

// setState moves a session as its state machine would.
func (s *sessions) setState(id string, st sessionv1.SessionState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.byID[id]
	x.State = st
	s.bump(x)
}

// WatchSession sends the session as it is, then each change, until it is
// stopped (deleted) or the caller leaves.
func (s *sessions) WatchSession(r *sessionv1.WatchSessionRequest, stream sessionv1.SessionService_WatchSessionServer) error {
	s.mu.Lock()
	x, ok := s.byID[r.GetSessionId()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "session %s not found", r.GetSessionId())
	}
	sent := int64(0)
	for {
		s.mu.Lock()
		cur := proto.Clone(x).(*sessionv1.Session)
		changed := s.changed
		s.mu.Unlock()
		if cur.GetGeneration() > sent {
			if err := stream.Send(&sessionv1.WatchSessionResponse{Session: cur}); err != nil {
				return err
			}
			sent = cur.GetGeneration()
		}
		if cur.GetState() == sessionv1.SessionState_SESSION_STATE_STOPPED {
			return nil
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

// ownedBy tells whether the caller (when authenticated) may see x.
func ownedBy(ctx context.Context, x *sessionv1.Session) bool {
	p, ok := auth.FromContext(ctx)
	return !ok || p.System || p.Tenant == x.GetTenant()
}

func (s *sessions) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byID[id]
	return ok
}

// harness is a gateway on a real listener in front of the fakes.
type harness struct {
	gw       *Gateway
	srv      *httptest.Server
	display  *vncDisplay
	sessions *sessions
	agent    *fakeAgent
	history  *fakeHistory
}

func newHarness(t testing.TB, cfg Config, deps Deps) *harness {
	t.Helper()
	h := &harness{
		display:  newVNCDisplay(fakeFramebuffer{Width: 64, Height: 48, R: 0x12, G: 0xa0, B: 0x63, Name: "fake desktop"}),
		sessions: newSessions("s-1"),
		history:  newFakeHistory(),
	}
	h.agent = newFakeAgent(h.history)
	h.sessions.history = h.history
	h.sessions.onCreate = h.display.addDisplay
	h.sessions.onDelete = h.display.deleteDisplay
	var opts []grpc.ServerOption
	if deps.Verifier != nil {
		// The backends check the forwarded key, as deskgrid's services do.
		opts = auth.ServerOptions(deps.Verifier, nil)
	}
	conn := grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) {
		displayv1.RegisterDisplayServiceServer(r, h.display)
		sessionv1.RegisterSessionServiceServer(r, h.sessions)
		sessionv1.RegisterNodeServiceServer(r, fakeNodes{sessions: h.sessions})
		agentv1.RegisterAgentServiceServer(r, h.agent)
		historyv1.RegisterHistoryServiceServer(r, h.history)
	}, grpcservertest.Options{ServerOptions: opts})
	deps.Backends = Backends{Session: conn, Node: conn, Agent: conn, History: conn}
	var err error
	h.gw, err = New(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(h.gw.Handler())
	t.Cleanup(func() {
		if err := h.gw.Close(context.Background()); err != nil {
			t.Error(err)
		}
		h.srv.Close()
	})
	return h
}

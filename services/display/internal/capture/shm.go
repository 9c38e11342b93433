package capture

import (
	"errors"
	"fmt"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xproto"
	"golang.org/x/sys/unix"
)

// Shared is a MIT-SHM segment the X server writes screenshots into, which
// spares the copy through the socket and two more inside xgb: a full-screen
// grab costs a fraction of a plain GetImage.
//
// The segment is marked for removal as soon as both sides have attached, so
// the kernel frees it when the last of them detaches or dies: nothing can
// leak, even after a crash.
type Shared struct {
	c   *xgb.Conn
	seg shm.Seg
	mem []byte
}

// NewShared creates a segment big enough for a full grab of s. It fails when
// the server lacks MIT-SHM or cannot attach (another IPC namespace).
func NewShared(c *xgb.Conn, s Screen) (*Shared, error) {
	c.ExtLock.RLock()
	_, ok := c.Extensions["MIT-SHM"]
	c.ExtLock.RUnlock()
	if !ok {
		return nil, errors.New("X server lacks MIT-SHM")
	}
	size := s.Width * s.Height * 4
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return nil, fmt.Errorf("shmget: %w", err)
	}
	// Removal only takes effect once every attachment is gone.
	defer unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("shmat: %w", err)
	}
	seg, err := shm.NewSegId(c)
	if err != nil {
		_ = unix.SysvShmDetach(mem)
		return nil, err
	}
	if err := shm.AttachChecked(c, seg, uint32(id), false).Check(); err != nil {
		_ = unix.SysvShmDetach(mem)
		return nil, fmt.Errorf("X server cannot attach shared memory: %w", err)
	}
	return &Shared{c: c, seg: seg, mem: mem}, nil
}

// Grab reads rect of the screen into the segment. The frame aliases the
// segment: it is valid until the next Grab or Close.
func (sh *Shared) Grab(s Screen, rect Rect) (*Frame, error) {
	if rect.Width == 0 && rect.Height == 0 {
		rect = Rect{Width: s.Width, Height: s.Height}
	}
	reply, err := shm.GetImage(sh.c, xproto.Drawable(s.Root), int16(rect.X), int16(rect.Y),
		uint16(rect.Width), uint16(rect.Height), ^uint32(0), xproto.ImageFormatZPixmap, sh.seg, 0).Reply()
	if err != nil {
		return nil, fmt.Errorf("shm GetImage: %w", err)
	}
	if int(reply.Size) > len(sh.mem) {
		return nil, fmt.Errorf("shm GetImage wrote %d bytes into a %d-byte segment", reply.Size, len(sh.mem))
	}
	f := &Frame{data: sh.mem[:reply.Size], screen: s, width: rect.Width, height: rect.Height}
	if f.bgrx() && len(f.data) < f.width*f.height*4 {
		return nil, fmt.Errorf("shm GetImage returned %d bytes, want %d", len(f.data), f.width*f.height*4)
	}
	return f, nil
}

// Close unmaps the segment here; the server's attachment ends with its
// connection.
func (sh *Shared) Close() error {
	if sh.mem == nil {
		return nil
	}
	err := unix.SysvShmDetach(sh.mem)
	sh.mem = nil
	return err
}

// Release detaches the segment on both sides while the connection stays
// open, as when the screen changes size and a segment of the new size
// replaces it; the kernel frees it then.
func (sh *Shared) Release() error {
	if sh.mem == nil {
		return nil
	}
	shm.Detach(sh.c, sh.seg)
	return sh.Close()
}

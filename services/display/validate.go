package display

import (
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/scale"
)

const (
	minSize       = 64
	maxWidth      = 7680
	maxHeight     = 4320
	maxDPI        = 1000
	maxSessionLen = 128
)

// validateSessionID accepts ids that are safe as a directory name.
func validateSessionID(id string) error {
	if id == "" {
		return invalidf("session_id is required")
	}
	if len(id) > maxSessionLen {
		return invalidf("session_id is longer than %d characters", maxSessionLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return invalidf("session_id %q may hold only a-z, 0-9 and '-'", id)
		}
	}
	return nil
}

func (s *Service) validateCreate(req *displayv1.CreateDisplayRequest) (displaySpec, error) {
	spec := displaySpec{
		sessionID: req.GetSessionId(),
		width:     int(req.GetWidth()),
		height:    int(req.GetHeight()),
		depth:     int(req.GetDepth()),
		dpi:       int(req.GetDpi()),
	}
	if err := validateSessionID(spec.sessionID); err != nil {
		return spec, err
	}
	if spec.width == 0 {
		spec.width = s.cfg.DefaultWidth
	}
	if spec.height == 0 {
		spec.height = s.cfg.DefaultHeight
	}
	if spec.depth == 0 {
		spec.depth = 24
	}
	if err := validateSize(spec.width, spec.height); err != nil {
		return spec, err
	}
	switch {
	case spec.depth != 16 && spec.depth != 24:
		return spec, invalidf("depth %d is not supported; use 16 or 24", spec.depth)
	case spec.dpi < 0 || spec.dpi > maxDPI:
		return spec, invalidf("dpi %d is outside 0-%d", spec.dpi, maxDPI)
	}
	return spec, nil
}

// validateSize checks a screen size; create and resize take the same.
func validateSize(w, h int) error {
	switch {
	case w < minSize || w > maxWidth:
		return invalidf("width %d is outside %d-%d", w, minSize, maxWidth)
	case h < minSize || h > maxHeight:
		return invalidf("height %d is outside %d-%d", h, minSize, maxHeight)
	}
	return nil
}

func validateFormat(f displayv1.ImageFormat, quality int32) (capture.Format, error) {
	if quality < 0 || quality > 100 {
		return 0, invalidf("quality %d is outside 1-100 (0 means %d)", quality, capture.DefaultJPEGQuality)
	}
	switch f {
	case displayv1.ImageFormat_IMAGE_FORMAT_UNSPECIFIED, displayv1.ImageFormat_IMAGE_FORMAT_PNG:
		return capture.PNG, nil
	case displayv1.ImageFormat_IMAGE_FORMAT_JPEG:
		return capture.JPEG, nil
	}
	return 0, invalidf("unknown image format %d", f)
}

// validateScale checks a scale_to for a w x h screen; unset means none.
func validateScale(sz *displayv1.Size, w, h int) (scale.Mapping, error) {
	if sz == nil || (sz.GetWidth() == 0 && sz.GetHeight() == 0) {
		return scale.Identity(w, h), nil
	}
	m, err := scale.New(w, h, int(sz.GetWidth()), int(sz.GetHeight()))
	if err != nil {
		return m, invalidf("%v", err)
	}
	return m, nil
}

// validateRegion checks r lies inside the (scaled) space of m and returns
// the screen region to grab and the size to deliver it at; nil or all zero
// means the whole screen.
func validateRegion(r *displayv1.Rect, m scale.Mapping) (shotSpec, error) {
	var spec shotSpec
	if m.Scaled() {
		spec.outW, spec.outH = m.W, m.H
	}
	if r == nil || (r.GetX() == 0 && r.GetY() == 0 && r.GetWidth() == 0 && r.GetHeight() == 0) {
		spec.rect = capture.Rect{Width: m.ScreenW, Height: m.ScreenH}
		return spec, nil
	}
	x, y, rw, rh := int(r.GetX()), int(r.GetY()), int(r.GetWidth()), int(r.GetHeight())
	if x < 0 || y < 0 || rw <= 0 || rh <= 0 || x+rw > m.W || y+rh > m.H {
		return spec, invalidf("region %dx%d+%d+%d is not inside the %dx%d screen", rw, rh, x, y, m.W, m.H)
	}
	if !m.Scaled() {
		spec.rect = capture.Rect{X: x, Y: y, Width: rw, Height: rh}
		return spec, nil
	}
	sx, sy, sw, sh := m.RectToScreen(x, y, rw, rh)
	spec.rect = capture.Rect{X: sx, Y: sy, Width: sw, Height: sh}
	spec.outW, spec.outH = rw, rh
	return spec, nil
}

package session

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Limits on what a request may carry.
const (
	maxLabels        = 64
	maxLabelKey      = 63
	maxLabelValue    = 255
	maxAutostart     = 16
	maxAutostartLine = 4096
	maxWorkspace     = 4096
	maxImage         = 1024 // a reference's name is at most 255 bytes, its tag 128, a digest 71
	maxRequestID     = 128
	maxPageSize      = 1000
	defaultPageSize  = 100
)

// fieldError is a request field that fails validation.
type fieldError struct {
	Field  string
	Reason string
}

func (e *fieldError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) *fieldError {
	return &fieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// spec is a validated create request with the defaults filled in.
type spec struct {
	display     *sessionv1.DisplaySpec
	limits      *sessionv1.ResourceLimits
	ttl         time.Duration
	idleTimeout time.Duration
}

func (s *Service) validateCreate(req *sessionv1.CreateSessionRequest) (spec, error) {
	var sp spec
	d := req.GetDisplay()
	if d == nil {
		d = &sessionv1.DisplaySpec{}
	}
	sp.display = &sessionv1.DisplaySpec{
		Width:  orDefault(d.Width, s.cfg.DefaultWidth),
		Height: orDefault(d.Height, s.cfg.DefaultHeight),
		Depth:  orDefault(d.Depth, s.cfg.DefaultDepth),
		Dpi:    d.GetDpi(),
	}
	switch w := sp.display.GetWidth(); {
	case w < 64 || w > 7680:
		return sp, invalid("display.width", "must be between 64 and 7680 pixels, got %d", w)
	}
	switch h := sp.display.GetHeight(); {
	case h < 64 || h > 4320:
		return sp, invalid("display.height", "must be between 64 and 4320 pixels, got %d", h)
	}
	if dp := sp.display.GetDepth(); dp != 16 && dp != 24 {
		return sp, invalid("display.depth", "must be 16 or 24 (absent for 24), got %d", dp)
	}
	if dpi := sp.display.Dpi; dpi < 0 || dpi > 1000 {
		return sp, invalid("display.dpi", "must be between 0 and 1000, got %d", dpi)
	}

	l := req.GetLimits()
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"limits.memory_bytes", l.GetMemoryBytes()},
		{"limits.cpu_millis", l.GetCpuMillis()},
		{"limits.pids", l.GetPids()},
		{"limits.disk_bytes", l.GetDiskBytes()},
	} {
		if f.v < 0 {
			return sp, invalid(f.name, "must not be negative, got %d", f.v)
		}
	}
	sp.limits = &sessionv1.ResourceLimits{
		MemoryBytes: l.GetMemoryBytes(), CpuMillis: l.GetCpuMillis(), Pids: l.GetPids(), DiskBytes: l.GetDiskBytes(),
	}

	var err error
	if sp.ttl, err = duration("ttl", req.GetTtl()); err != nil {
		return sp, err
	}
	if sp.ttl == 0 {
		sp.ttl = s.cfg.DefaultTTL
	}
	if sp.ttl > s.cfg.MaxTTL {
		return sp, invalid("ttl", "must be at most %s, got %s", s.cfg.MaxTTL, sp.ttl)
	}
	if sp.idleTimeout, err = duration("idle_timeout", req.GetIdleTimeout()); err != nil {
		return sp, err
	}
	if sp.idleTimeout == 0 {
		sp.idleTimeout = s.cfg.DefaultIdleTimeout
	}

	if err := validateLabels("labels", req.GetLabels()); err != nil {
		return sp, err
	}
	if err := validateLabels("node_selector", req.GetNodeSelector()); err != nil {
		return sp, err
	}
	if n := len(req.GetAutostart()); n > maxAutostart {
		return sp, invalid("autostart", "at most %d programs, got %d", maxAutostart, n)
	}
	for i, a := range req.GetAutostart() {
		field := fmt.Sprintf("autostart[%d]", i)
		switch {
		case strings.TrimSpace(a) == "":
			return sp, invalid(field, "must not be empty")
		case len(a) > maxAutostartLine:
			return sp, invalid(field, "must be at most %d bytes", maxAutostartLine)
		case !printable(a):
			return sp, invalid(field, "must be valid UTF-8 without control characters")
		}
	}
	if w := req.GetWorkspace(); len(w) > maxWorkspace || !printable(w) {
		return sp, invalid("workspace", "must be a path of at most %d bytes without control characters", maxWorkspace)
	}
	if im := req.GetImage(); len(im) > maxImage || !printable(im) {
		return sp, invalid("image", "must be an image reference of at most %d bytes without control characters", maxImage)
	}
	if r := req.GetRequestId(); len(r) > maxRequestID || !printable(r) {
		return sp, invalid("request_id", "must be at most %d printable bytes", maxRequestID)
	}
	return sp, nil
}

// orDefault applies def when the field is absent; a field set to 0 stays 0
// and is refused by the range checks, as a client that sends 0 made a mistake.
func orDefault(v *int32, def int32) *int32 {
	if v == nil {
		return &def
	}
	return v
}

func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, "is not a valid duration: %v", err)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, invalid(field, "must not be negative, got %s", v)
	}
	return v, nil
}

func validateLabels(field string, labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid(field, "at most %d entries, got %d", maxLabels, len(labels))
	}
	for k, v := range labels {
		if err := labelKey(k); err != "" {
			return invalid(fmt.Sprintf("%s[%q]", field, k), "key %s", err)
		}
		if len(v) > maxLabelValue || !printable(v) {
			return invalid(fmt.Sprintf("%s[%q]", field, k), "value must be at most %d printable bytes", maxLabelValue)
		}
	}
	return nil
}

// labelKey checks a label key: 1 to 63 of a-z, 0-9, '_', '.', '-', '/'.
func labelKey(k string) string {
	if k == "" || len(k) > maxLabelKey {
		return fmt.Sprintf("must be 1 to %d characters", maxLabelKey)
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-', c == '/':
		default:
			return "may only hold a-z, 0-9, '_', '.', '-' and '/'"
		}
	}
	return ""
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// validateList checks a list request and returns its page size.
func validateList(req *sessionv1.ListSessionsRequest) (int, error) {
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > maxPageSize:
		return 0, invalid("page_size", "must be between 0 and %d, got %d", maxPageSize, size)
	case size == 0:
		size = defaultPageSize
	}
	for i, st := range req.GetStates() {
		if st == sessionv1.SessionState_SESSION_STATE_UNSPECIFIED {
			return 0, invalid(fmt.Sprintf("states[%d]", i), "must name a state")
		}
		if _, ok := sessionv1.SessionState_name[int32(st)]; !ok {
			return 0, invalid(fmt.Sprintf("states[%d]", i), "unknown state %d", st)
		}
	}
	if err := validateLabels("labels", req.GetLabels()); err != nil {
		return 0, err
	}
	if len(req.GetPageToken()) > 1024 {
		return 0, invalid("page_token", "is not a token this service made")
	}
	return size, nil
}

func checkID(id string) error {
	if id == "" {
		return invalid("session_id", "is required")
	}
	if !validID(id) {
		return invalid("session_id", "%q is not a session id (\"s-\" and 20 lowercase letters and digits)", truncate(id, 64))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

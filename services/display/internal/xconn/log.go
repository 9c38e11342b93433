package xconn

import (
	"log"
	"log/slog"
	"strings"

	"github.com/jezek/xgb"
)

// xgb reports through its own package logger, on stderr by default; its
// messages (a missing ~/.Xauthority it never needs here, a connection closed
// under its reader) go to slog at debug level instead.
func init() {
	xgb.Logger = log.New(slogWriter{}, "", 0)
}

type slogWriter struct{}

func (slogWriter) Write(p []byte) (int, error) {
	slog.Default().Debug("xgb", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

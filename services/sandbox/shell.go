package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// maxShellOutput bounds what one RunShell returns; the rest is dropped.
const maxShellOutput = 1 << 20

// shell is a session's long-lived bash: the `bash` tool of computer-use
// agents expects cd, variables and functions to carry over between calls.
// An image without bash (busybox, Alpine) gets its /bin/sh instead.
type shell struct {
	p      *jail.Proc
	in     *os.File    // the shell's stdin
	chunks chan []byte // its stdout and stderr; closed at EOF
}

func (s *Service) startShell(b *box, asRoot bool) (*shell, error) {
	spec, err := s.jailSpec(b.kill, b, shellArgv, nil, "", "", asRoot)
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p, err := jail.Spawn(spec, inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	sh := &shell{p: p, in: inW, chunks: make(chan []byte, 16)}
	go func() {
		defer close(sh.chunks)
		defer outR.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				sh.chunks <- bytes.Clone(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return sh, nil
}

// shellArgv starts bash where the session has it, else the POSIX shell.
var shellArgv = []string{"/bin/sh", "-c", `if command -v bash >/dev/null 2>&1; then export SHELL="$(command -v bash)"; exec bash --noprofile --norc; fi; export SHELL=/bin/sh; exec /bin/sh`}

func (sh *shell) stop() {
	sh.p.Kill()
	sh.in.Close()
	<-sh.p.Done()
	for range sh.chunks { // let the reader finish
	}
}

// stopShell ends the session's shells (the user's and root's), if any.
func (b *box) stopShell() {
	b.shellMu.Lock()
	defer b.shellMu.Unlock()
	for _, sh := range []**shell{&b.shell, &b.rootShell} {
		if *sh != nil {
			(*sh).stop()
			*sh = nil
		}
	}
}

// quote makes s one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type shellResult struct {
	output    []byte
	exitCode  int
	timedOut  bool
	truncated bool
}

func (s *Service) runShell(ctx context.Context, req *sandboxv1.RunShellRequest) (shellResult, error) {
	var res shellResult
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return res, err
	}
	if strings.TrimSpace(req.GetCommand()) == "" {
		return res, invalidf("command is required")
	}
	if strings.IndexByte(req.GetCommand(), 0) >= 0 {
		return res, invalidf("command contains a NUL byte")
	}
	if n := len(req.GetCommand()); n > maxCommandBytes {
		return res, invalidf("command is %d bytes; at most %d are allowed (write a script file and run it)", n, maxCommandBytes)
	}
	timeout, err := s.execTimeout(&sandboxv1.ExecRequest{Timeout: req.GetTimeout()})
	if err != nil {
		return res, err
	}
	b, release, err := s.acquire(ctx, req.GetSessionId())
	if err != nil {
		return res, err
	}
	defer release()
	if b.isFrozen() {
		return res, failf(errFrozen, "session %q's sandbox is frozen; thaw it first", b.id)
	}
	b.shellMu.Lock()
	defer b.shellMu.Unlock()
	slot := &b.shell
	if req.GetAsRoot() {
		slot = &b.rootShell
	}
	if *slot == nil {
		if *slot, err = s.startShell(b, req.GetAsRoot()); err != nil {
			return res, fmt.Errorf("start shell: %w", err)
		}
	}
	sh := *slot
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	sentinel := "__deskgrid_" + hex.EncodeToString(raw[:]) + "__:"
	// eval keeps a syntax error from desynchronising the shell; stdin is not
	// the command's, or it would read the next calls.
	script := "eval " + quote(req.GetCommand()) + " </dev/null\nprintf '%s%d\\n' " + quote(sentinel) + " \"$?\"\n"
	if _, err := sh.in.WriteString(script); err != nil {
		sh.stop()
		*slot = nil
		return res, failf(errInterrupted, "the shell of session %q had ended; it starts afresh on the next call", b.id)
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var out, window []byte
	for {
		select {
		case c, ok := <-sh.chunks:
			if !ok {
				// The command ended the shell (exit, exec): report how.
				exit, _ := sh.p.Exit()
				sh.in.Close()
				*slot = nil
				res.output, res.exitCode = appendBounded(out, window, &res.truncated), exit.Code
				return res, nil
			}
			window = append(window, c...)
			if i := bytes.Index(window, []byte(sentinel)); i >= 0 {
				rest := window[i+len(sentinel):]
				if j := bytes.IndexByte(rest, '\n'); j >= 0 {
					fmt.Sscanf(string(rest[:j]), "%d", &res.exitCode)
					out = appendBounded(out, window[:i], &res.truncated)
					res.output = out
					return res, nil
				}
				continue // the status line is still coming
			}
			// Keep only what could be the start of a sentinel in the window.
			if keep := len(sentinel) + 16; len(window) > keep {
				out = appendBounded(out, window[:len(window)-keep], &res.truncated)
				window = append([]byte(nil), window[len(window)-keep:]...)
			}
		case <-timer.C:
			sh.stop()
			*slot = nil
			res.output, res.timedOut, res.exitCode = appendBounded(out, window, &res.truncated), true, 124
			return res, nil
		case <-b.kill.Done():
			sh.stop()
			*slot = nil
			return res, failf(errInterrupted, "session %q's sandbox was deleted while the command ran", b.id)
		case <-ctx.Done():
			// The shell's state is unknown now: start afresh next time.
			sh.stop()
			*slot = nil
			return res, ctx.Err()
		}
	}
}

func appendBounded(dst, p []byte, truncated *bool) []byte {
	if room := maxShellOutput - len(dst); len(p) > room {
		*truncated = true
		p = p[:max(room, 0)]
	}
	return append(dst, p...)
}

func (s *Service) restartShell(ctx context.Context, id string) error {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	if b.isFrozen() {
		return failf(errFrozen, "session %q's sandbox is frozen; thaw it first", b.id)
	}
	b.stopShell()
	return nil
}

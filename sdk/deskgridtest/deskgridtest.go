// Package deskgridtest runs a real deskgrid (`deskgrid up`) for tests, on
// free loopback ports with its own data and runtime directories, much as
// net/http/httptest runs a server.
//
// The binary is $DESKGRID_BIN, else `deskgrid` on PATH, else built from the
// deskgrid workspace the test runs in.
package deskgridtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a running deskgrid.
type Server struct {
	// GRPCAddr is the gRPC address (host:port); HTTPURL the REST base URL.
	GRPCAddr string
	HTTPURL  string
	DataDir  string
	RunDir   string
	// APIKey is the admin key deskgrid made (its -auth is on by default).
	APIKey string

	tb   testing.TB
	cmd  *exec.Cmd
	logs *logBuffer
	done chan error
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// Binary returns the deskgrid binary the tests run.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("DESKGRID_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deskgridtest")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "deskgrid")
		args := []string{"build", "-o", built}
		if raceEnabled {
			// A race-detecting test run tests a race-detecting deskgrid too.
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/deskgrid/deskgrid/cmd/deskgrid")...).CombinedOutput()
		if err != nil {
			if p, lerr := exec.LookPath("deskgrid"); lerr == nil {
				built, buildErr = p, nil
				return
			}
			buildErr = fmt.Errorf("build deskgrid: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return built
}

func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs `deskgrid up` with extra flags and waits until it is ready.
// It is stopped (as with Ctrl-C) when the test ends. Its sessions run on the
// machine's own programs unless the flags name a default image
// ("-default-image", "deskgrid/desktop:latest"): importing the desktop image
// into every test's fresh data dir would cost each test a gigabyte.
func Start(tb testing.TB, flags ...string) *Server {
	tb.Helper()
	return StartIn(tb, tb.TempDir(), tb.TempDir(), flags...)
}

// StartIn is Start with given data and runtime dirs, as a restart after a
// crash finds them.
func StartIn(tb testing.TB, dataDir, runDir string, flags ...string) *Server {
	tb.Helper()
	// A free port may be taken by another process between the moment it
	// is picked and deskgrid's listen: started again on other ports.
	for try := 1; ; try++ {
		s, err := startIn(tb, dataDir, runDir, flags...)
		if err == nil {
			return s
		}
		if try == 3 || !strings.Contains(s.logs.String(), "address already in use") {
			tb.Fatalf("%v\n%s", err, s.logs)
		}
	}
}

func startIn(tb testing.TB, dataDir, runDir string, flags ...string) (*Server, error) {
	s := &Server{tb: tb, DataDir: dataDir, RunDir: runDir, logs: &logBuffer{}, done: make(chan error, 1)}
	httpAddr, grpcAddr := freeAddr(tb), freeAddr(tb)
	s.GRPCAddr, s.HTTPURL = grpcAddr, "http://"+httpAddr
	args := []string{"up",
		"-http-addr", httpAddr, "-grpc-addr", grpcAddr,
		"-data-dir", s.DataDir, "-runtime-dir", s.RunDir,
		"-default-image", ""}
	s.cmd = exec.Command(Binary(tb), append(args, flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.HTTPURL+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if b, err := os.ReadFile(filepath.Join(s.DataDir, "admin.key")); err == nil {
					s.APIKey = strings.TrimSpace(string(b))
				}
				tb.Cleanup(s.Stop)
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return s, fmt.Errorf("deskgrid up exited before it was ready: %v", err)
		case <-ctx.Done():
			s.Stop()
			return s, errors.New("deskgrid up not ready in time")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill ends deskgrid with SIGKILL, as a crash would, leaving whatever its
// sessions made for the next start to find.
func (s *Server) Kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	s.done <- <-s.done
}

// Logs is what deskgrid printed so far.
func (s *Server) Logs() string { return s.logs.String() }

// Stop interrupts deskgrid and waits for it to finish; it deletes every session.
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			s.tb.Errorf("deskgrid up exited with %v after interrupt\n%s", err, s.logs)
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		s.tb.Errorf("deskgrid up did not stop after interrupt\n%s", s.logs)
	}
}

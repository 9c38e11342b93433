// Package deskgridtest runs a real deskgrid (`deskgrid up`) for tests, on
// free loopback ports with its own data and runtime directories, much as
// net/http/httptest runs a server. Process runs any other deskgrid command
// (a `serve <role>` of a cluster) the same way.
//
// The binary is $DESKGRID_BIN, else `deskgrid` on PATH, else built from the
// deskgrid workspace the test runs in.
package deskgridtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

	*Process
}

// Process is one deskgrid command a test runs, such as a `serve <role>` of a
// cluster: its output is kept, it is stopped when the test ends, and it
// can be killed and started again.
type Process struct {
	// Name says which process it is in failure messages.
	Name string
	// Args follow the binary: "serve", "node", "-grpc-addr", ...
	Args []string
	// Wrap runs the process through a command, such as nsenter into a
	// network namespace: Wrap..., deskgrid, Args...
	Wrap []string
	// Env is added to the test's environment.
	Env []string
	// Ready reports whether the process serves; Start waits for it.
	Ready func() bool

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

// FreeAddr is a loopback address no one listened on a moment ago. Another
// process may take it before the test listens: Start retries on other
// ports for that reason.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
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
	httpAddr, grpcAddr := FreeAddr(tb), FreeAddr(tb)
	s := &Server{GRPCAddr: grpcAddr, HTTPURL: "http://" + httpAddr, DataDir: dataDir, RunDir: runDir}
	args := []string{"up",
		"-http-addr", httpAddr, "-grpc-addr", grpcAddr,
		"-data-dir", s.DataDir, "-runtime-dir", s.RunDir,
		"-default-image", ""}
	client := &http.Client{Timeout: 5 * time.Second}
	s.Process = &Process{Name: "deskgrid up", Args: append(args, flags...), Ready: func() bool {
		resp, err := client.Get(s.HTTPURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}}
	if err := s.start(tb); err != nil {
		return s, err
	}
	if b, err := os.ReadFile(filepath.Join(s.DataDir, "admin.key")); err == nil {
		s.APIKey = strings.TrimSpace(string(b))
	}
	tb.Cleanup(s.Stop)
	return s, nil
}

// StartProcess starts p and waits until it is ready; it is stopped (as
// with Ctrl-C) when the test ends.
func StartProcess(tb testing.TB, p *Process) *Process {
	tb.Helper()
	p.Start(tb)
	tb.Cleanup(p.Stop)
	return p
}

// Start runs p (again, after Stop or Kill) and waits until it is ready,
// failing the test if it exits first or is not ready within a minute.
func (p *Process) Start(tb testing.TB) {
	tb.Helper()
	if err := p.start(tb); err != nil {
		tb.Fatalf("%v\n%s", err, p.logs)
	}
}

func (p *Process) start(tb testing.TB) error {
	p.tb, p.logs, p.done = tb, &logBuffer{}, make(chan error, 1)
	argv := append(append(slices.Clone(p.Wrap), Binary(tb)), p.Args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	if len(p.Env) > 0 {
		p.cmd.Env = append(os.Environ(), p.Env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.After(time.Minute)
	for {
		if p.Ready == nil || p.Ready() {
			return nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited before it was ready: %v", p.Name, err)
		case <-deadline:
			p.Stop()
			return fmt.Errorf("%s not ready in time", p.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

// Kill ends the process with SIGKILL, as a crash would, leaving whatever
// its sessions made for the next start to find.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Kill()
	p.done <- <-p.done
}

// Logs is what the process printed so far.
func (p *Process) Logs() string { return p.logs.String() }

// Stop interrupts the process and waits for it to finish (deskgrid up
// deletes every session); it fails the test if the process does not stop
// or stops with an error.
func (p *Process) Stop() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			p.tb.Errorf("%s exited with %v after interrupt\n%s", p.Name, err, p.logs)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
		p.tb.Errorf("%s did not stop after interrupt\n%s", p.Name, p.logs)
	}
}

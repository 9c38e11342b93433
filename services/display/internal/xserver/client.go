package xserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is a program this service runs on a display, such as its window
// manager.
type Client struct {
	PID int

	exited      chan struct{}
	stopTimeout time.Duration
	stopOnce    sync.Once
	stopErr     error
}

// StartClient runs argv as a client of display num with the cookie in
// authFile, its output in logFile. Like the server, it gets its own process
// group and dies with this process.
func StartClient(num int, authFile, logFile string, argv []string, stopTimeout time.Duration) (*Client, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command to run on :%d", num)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	env := make([]string, 0, len(os.Environ())+2)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DISPLAY=") && !strings.HasPrefix(e, "XAUTHORITY=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "DISPLAY=:"+strconv.Itoa(num), "XAUTHORITY="+authFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", argv[0], err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	c := &Client{PID: cmd.Process.Pid, exited: make(chan struct{}), stopTimeout: stopTimeout}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Exited is closed when the program has exited.
func (c *Client) Exited() <-chan struct{} { return c.exited }

// Stop terminates the program and waits for it.
func (c *Client) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		c.stopErr = stopProcess(ctx, c.PID, c.exited, c.stopTimeout)
	})
	return c.stopErr
}

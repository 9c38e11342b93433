// Package natsembed runs a nats-server with JetStream inside the process, for
// the all-in-one mode and for tests.
package natsembed

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure the embedded server.
type Options struct {
	// Host to listen on; "127.0.0.1" when empty.
	Host string
	// Port to listen on; -1 picks a free one.
	Port int
	// StoreDir holds JetStream's files.
	StoreDir string
	// ReadyTimeout bounds the wait for the server to accept connections.
	ReadyTimeout time.Duration
}

// Server is a running embedded nats-server.
type Server struct {
	srv *server.Server
}

// Start runs a nats-server and waits until it accepts connections.
func Start(opts Options) (*Server, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("natsembed: StoreDir is required")
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "deskgrid-embedded",
		Host:       opts.Host,
		Port:       opts.Port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(opts.ReadyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("natsembed: server not ready after %s", opts.ReadyTimeout)
	}
	return &Server{srv: srv}, nil
}

// URL is the client URL of the server.
func (s *Server) URL() string { return s.srv.ClientURL() }

// Close shuts the server down and waits for it.
func (s *Server) Close() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

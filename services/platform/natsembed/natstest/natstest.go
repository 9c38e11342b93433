// Package natstest gives tests an embedded nats-server with JetStream and a
// connection to it, both closed when the test ends.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/deskgrid/deskgrid/services/platform/natsembed"
)

// Start runs a server on a free loopback port with its store in a temp dir.
func Start(tb testing.TB) (*natsembed.Server, *nats.Conn, jetstream.JetStream) {
	tb.Helper()
	srv, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, nc, js
}

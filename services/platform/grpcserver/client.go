package grpcserver

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// ReconnectMaxDelay is the longest a client connection waits between two
// attempts to reach a peer that went away. gRPC's default grows to two
// minutes: a node or replica that was down for a minute was then shunned
// for half a minute after it was back. Peers here are a few, on a private
// network: trying once a second costs nothing.
const ReconnectMaxDelay = time.Second

// ClientOptions are the dial options of every connection one deskgrid
// process opens to another: reconnect back-off capped at ReconnectMaxDelay,
// and keepalive pings (within what New's enforcement policy allows) so a
// peer cut off without a reset is noticed.
func ClientOptions() []grpc.DialOption {
	bc := backoff.DefaultConfig
	bc.BaseDelay = 100 * time.Millisecond
	bc.MaxDelay = ReconnectMaxDelay
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
}

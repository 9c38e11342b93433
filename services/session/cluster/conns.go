package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/platform/noderoute"
)

// NodeConns reaches registered nodes by id, for the session service (it
// implements session.Nodes). A node's address is read from the registry
// and its connection kept; a node that re-registers at a new address is
// picked up once the old address stops answering and is looked up again.
//
// A node the registry says is alive is reached at once when it is back:
// a connection still waiting out its reconnect back-off (the node was
// down) is told to try again and given up to readyWait to connect, so the
// first call after a restarted node heartbeats reaches it.
type NodeConns struct {
	reg         *Registry
	dialOptions []grpc.DialOption

	mu    sync.Mutex
	addrs map[string]cachedAddr
	conns map[string]*grpc.ClientConn
	// failedWait: when a wait for a connection last ended without it
	// connecting; calls within readyWait of it do not wait again.
	failedWait map[*grpc.ClientConn]time.Time
}

// cachedAddr is a node's address and liveness as last read from the registry.
type cachedAddr struct {
	addr  string
	alive bool
	read  time.Time
}

// readyWait bounds how long a call to a node the registry calls alive waits
// for its connection to (re)connect.
const readyWait = time.Second

// addrTTL bounds how long a node's address is trusted without reading the
// registry again: a node restarted on a new address (kill -9 and back before
// its heartbeat expired) is reached within it, whichever replica noticed.
const addrTTL = 250 * time.Millisecond

// NewNodeConns dials nodes with opts (insecure transport is added).
func NewNodeConns(reg *Registry, opts ...grpc.DialOption) *NodeConns {
	base := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, grpcserver.ClientOptions()...)
	return &NodeConns{reg: reg, dialOptions: append(base, opts...),
		addrs: map[string]cachedAddr{}, conns: map[string]*grpc.ClientConn{}, failedWait: map[*grpc.ClientConn]time.Time{}}
}

// lookupTimeout bounds reading a node's address; the caller's own call has
// its deadline, but the session.Nodes interface has no context.
const lookupTimeout = 2 * time.Second

// Conn returns the connection to node id.
func (c *NodeConns) Conn(id string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	cached, ok := c.addrs[id]
	c.mu.Unlock()
	addr, alive := cached.addr, cached.alive
	if !ok || time.Since(cached.read) > addrTTL {
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		n, err := c.reg.Node(ctx, id)
		if err != nil {
			return nil, err
		}
		addr, alive = n.Address, n.Alive
		c.mu.Lock()
		c.addrs[id] = cachedAddr{addr: addr, alive: alive, read: time.Now()}
		c.mu.Unlock()
	}
	c.mu.Lock()
	cc, ok := c.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, c.dialOptions...); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("dial node %s at %s: %w", id, addr, err)
		}
		c.conns[addr] = cc
	}
	waitedRecently := time.Since(c.failedWait[cc]) < readyWait
	c.mu.Unlock()
	if alive && !waitedRecently && !awaitReady(cc, readyWait) {
		c.mu.Lock()
		c.failedWait[cc] = time.Now()
		c.mu.Unlock()
	}
	return cc, nil
}

// awaitReady makes cc connect now, skipping what is left of its reconnect
// back-off, and waits until it is ready, one attempt failed, or within
// passed. A failed attempt is left for the call to report (Unavailable).
func awaitReady(cc *grpc.ClientConn, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	attempted := false
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Ready:
			return true
		case connectivity.Shutdown:
			return false
		case connectivity.Idle:
			cc.Connect()
		case connectivity.Connecting:
			attempted = true
		case connectivity.TransientFailure:
			if attempted {
				return false
			}
			attempted = true
			cc.ResetConnectBackoff()
		}
		if !cc.WaitForStateChange(ctx, st) {
			return false
		}
	}
}

// Forget drops node id's cached address, so the next call reads it again.
func (c *NodeConns) Forget(id string) {
	c.mu.Lock()
	delete(c.addrs, id)
	c.mu.Unlock()
}

// Display implements session.Nodes.
func (c *NodeConns) Display(id string) (displayv1.DisplayServiceClient, error) {
	cc, err := c.Conn(id)
	if err != nil {
		return nil, err
	}
	return displayv1.NewDisplayServiceClient(cc), nil
}

// Sandbox implements session.Nodes.
func (c *NodeConns) Sandbox(id string) (sandboxv1.SandboxServiceClient, error) {
	cc, err := c.Conn(id)
	if err != nil {
		return nil, err
	}
	return sandboxv1.NewSandboxServiceClient(cc), nil
}

// Image returns node id's image service client.
func (c *NodeConns) Image(id string) (imagev1.ImageServiceClient, error) {
	cc, err := c.Conn(id)
	if err != nil {
		return nil, err
	}
	return imagev1.NewImageServiceClient(cc), nil
}

// Close closes every node connection.
func (c *NodeConns) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cc := range c.conns {
		errs = append(errs, cc.Close())
		delete(c.conns, addr)
		delete(c.failedWait, cc)
	}
	return errors.Join(errs...)
}

// RouteResolver resolves sessions to node addresses for a noderoute.Router
// (the gateway's and agent's view of the session map).
func (r *Registry) RouteResolver() noderoute.Resolver {
	return noderoute.ResolverFunc(func(ctx context.Context, sessionID string) (string, error) {
		addr, err := r.Resolve(ctx, sessionID)
		if errors.Is(err, ErrSessionNotPlaced) || errors.Is(err, ErrNodeNotFound) {
			return "", fmt.Errorf("%w: %w", noderoute.ErrNotPlaced, err)
		}
		return addr, err
	})
}

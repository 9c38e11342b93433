package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/noderoute"
)

// NodeConns reaches registered nodes by id, for the session service (it
// implements session.Nodes). A node's address is read from the registry
// and its connection kept; a node that re-registers at a new address is
// picked up once the old address stops answering and is looked up again.
type NodeConns struct {
	reg         *Registry
	dialOptions []grpc.DialOption

	mu    sync.Mutex
	addrs map[string]cachedAddr
	conns map[string]*grpc.ClientConn
}

// cachedAddr is a node's address as last read from the registry.
type cachedAddr struct {
	addr string
	read time.Time
}

// addrTTL bounds how long a node's address is trusted without reading the
// registry again: a node restarted on a new address (kill -9 and back before
// its heartbeat expired) is reached within it, whichever replica noticed.
const addrTTL = 250 * time.Millisecond

// NewNodeConns dials nodes with opts (insecure transport is added).
func NewNodeConns(reg *Registry, opts ...grpc.DialOption) *NodeConns {
	return &NodeConns{reg: reg, dialOptions: append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...),
		addrs: map[string]cachedAddr{}, conns: map[string]*grpc.ClientConn{}}
}

// lookupTimeout bounds reading a node's address; the caller's own call has
// its deadline, but the session.Nodes interface has no context.
const lookupTimeout = 2 * time.Second

// Conn returns the connection to node id.
func (c *NodeConns) Conn(id string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	cached, ok := c.addrs[id]
	c.mu.Unlock()
	addr := cached.addr
	if !ok || time.Since(cached.read) > addrTTL {
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		n, err := c.reg.Node(ctx, id)
		if err != nil {
			return nil, err
		}
		addr = n.Address
		c.mu.Lock()
		c.addrs[id] = cachedAddr{addr: addr, read: time.Now()}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("dial node %s at %s: %w", id, addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
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

// Close closes every node connection.
func (c *NodeConns) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cc := range c.conns {
		errs = append(errs, cc.Close())
		delete(c.conns, addr)
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

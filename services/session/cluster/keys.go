// Package cluster keeps deskgrid's cluster state in Redis: the node registry
// (registration, heartbeat, drain), the session map (session -> node,
// generation) with the capacity each placement reserves, a placer that
// reserves atomically so replicas never overfill a node, and a watcher that
// finds nodes whose heartbeat expired.
//
// Keys, all under one prefix (such as "deskgrid:"):
//
//	nodes              hash: node id -> address, sessions, cpu, mem, labels
//	                   (tab-separated; labels as JSON)
//	alive:<id>         the heartbeat: a string that expires after the TTL
//	draining           set of node ids that take no new sessions
//	used               hash: "<id>\ts|c|m" -> sessions, cpu, mem reserved
//	tenants:<id>       hash: tenant -> sessions it holds on the node
//	sessions:<id>      set of the sessions the node is given
//	images:<id>        set of keys naming the images the node holds
//	                   (placement.HeldImageKeys), which placement prefers
//	smap               hash: session -> node, generation, cpu, mem, tenant
//	gen                counter the generations come from
//	epoch              a random id set once the session map was built (or
//	                   rebuilt from the session records); missing when
//	                   Redis lost its data (restarted empty, flushed)
//
// A snapshot of every node is a handful of commands whatever the number of
// nodes, which keeps placement fast at hundreds of nodes. Scripts touch keys
// they compute from the prefix, so the keys of one deployment must live on
// one Redis server (no Redis Cluster sharding).
package cluster

import (
	"errors"
	"strconv"
	"strings"
)

// DefaultPrefix starts every key when none is configured.
const DefaultPrefix = "deskgrid:"

// ErrNodeNotFound: no node with that id is registered.
var ErrNodeNotFound = errors.New("node not found")

// ErrSessionNotPlaced: the session map has no entry for the session.
var ErrSessionNotPlaced = errors.New("session is not placed on any node")

// ErrMapRebuilding: Redis lost the session map (restarted empty, flushed)
// and it is not rebuilt yet, or its nodes have not registered again.
var ErrMapRebuilding = errors.New("session map is being rebuilt")

type keys string

func (k keys) nodes() string             { return string(k) + "nodes" }
func (k keys) alive(id string) string    { return string(k) + "alive:" + id }
func (k keys) draining() string          { return string(k) + "draining" }
func (k keys) used() string              { return string(k) + "used" }
func (k keys) tenants(id string) string  { return string(k) + "tenants:" + id }
func (k keys) sessions(id string) string { return string(k) + "sessions:" + id }
func (k keys) images(id string) string   { return string(k) + "images:" + id }
func (k keys) smap() string              { return string(k) + "smap" }
func (k keys) epoch() string             { return string(k) + "epoch" }

// Assignment is one session-map entry.
type Assignment struct {
	SessionID string
	NodeID    string
	// Generation increases with every placement in the deployment; a node
	// holding a session under an older generation than the map's does not
	// own it any more.
	Generation int64
	CPUMillis  int64
	Memory     int64
	Tenant     string
}

// The map value is tab-separated: node, generation, cpu, mem, tenant.
func parseAssignment(sessionID, v string) (Assignment, bool) {
	f := strings.SplitN(v, "\t", 5)
	if len(f) != 5 {
		return Assignment{}, false
	}
	a := Assignment{SessionID: sessionID, NodeID: f[0], Tenant: f[4]}
	a.Generation, _ = strconv.ParseInt(f[1], 10, 64)
	a.CPUMillis, _ = strconv.ParseInt(f[2], 10, 64)
	a.Memory, _ = strconv.ParseInt(f[3], 10, 64)
	return a, true
}

package cluster

import "github.com/redis/go-redis/v9"

// reserveScript places a session on a node if, at that instant, the node is
// alive, not draining and has room; otherwise it changes nothing. Being one
// script, concurrent reservations from any number of replicas are serialised
// by Redis. A session already in the map keeps its node.
//
// ARGV: prefix, node, session, cpu, mem, tenant.
// Returns {"ok", generation} | {"elsewhere", node} | {"dead"} | {"draining"} |
// {"unknown"} | {"full", resource}.
var reserveScript = redis.NewScript(`
local p, node, sid, tenant = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local cpu, mem = tonumber(ARGV[4]), tonumber(ARGV[5])
local cur = redis.call('HGET', p..'smap', sid)
if cur then
  local n, g = string.match(cur, '^([^\t]*)\t([^\t]*)')
  if n == node then return {'ok', g} end
  return {'elsewhere', n}
end
if redis.call('EXISTS', p..'alive:'..node) == 0 then return {'dead'} end
if redis.call('SISMEMBER', p..'draining', node) == 1 then return {'draining'} end
local info = redis.call('HGET', p..'nodes', node)
if not info then return {'unknown'} end
local _, s1, c1, m1 = string.match(info, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)')
local used = redis.call('HMGET', p..'used', node..'\ts', node..'\tc', node..'\tm')
local us, uc, um = tonumber(used[1] or '0'), tonumber(used[2] or '0'), tonumber(used[3] or '0')
local cs, cc, cm = tonumber(s1), tonumber(c1 or '0'), tonumber(m1 or '0')
if us + 1 > cs then return {'full', 'sessions'} end
if cc > 0 and uc + cpu > cc then return {'full', 'cpu'} end
if cm > 0 and um + mem > cm then return {'full', 'memory'} end
redis.call('HINCRBY', p..'used', node..'\ts', 1)
redis.call('HINCRBY', p..'used', node..'\tc', cpu)
redis.call('HINCRBY', p..'used', node..'\tm', mem)
redis.call('HINCRBY', p..'tenants:'..node, tenant, 1)
redis.call('SADD', p..'sessions:'..node, sid)
local g = redis.call('INCR', p..'gen')
redis.call('HSET', p..'smap', sid, node..'\t'..g..'\t'..cpu..'\t'..mem..'\t'..tenant)
return {'ok', tostring(g)}
`)

// releaseScript gives back what a session reserved. With a node given, it
// only releases if the session is on that node, so a late release from an
// old placement cannot free a newer one. Returns 1 if it released.
//
// ARGV: prefix, node (may be empty), session.
var releaseScript = redis.NewScript(`
local p, want, sid = ARGV[1], ARGV[2], ARGV[3]
local cur = redis.call('HGET', p..'smap', sid)
if not cur then return 0 end
local node, g, cpu, mem, tenant = string.match(cur, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
if not node then redis.call('HDEL', p..'smap', sid) return 0 end
if want ~= '' and want ~= node then return 0 end
redis.call('HINCRBY', p..'used', node..'\ts', -1)
redis.call('HINCRBY', p..'used', node..'\tc', 0 - tonumber(cpu))
redis.call('HINCRBY', p..'used', node..'\tm', 0 - tonumber(mem))
if redis.call('HINCRBY', p..'tenants:'..node, tenant, -1) <= 0 then
  redis.call('HDEL', p..'tenants:'..node, tenant)
end
redis.call('SREM', p..'sessions:'..node, sid)
redis.call('HDEL', p..'smap', sid)
return 1
`)

// heartbeatScript renews a node's heartbeat and returns 1 if it had expired
// (or never existed), or holds another value than the node's last
// heartbeat it saw succeed: the node was (or may have been) considered gone
// and must reconcile. The second case is a heartbeat sent into a network
// partition whose answer never came back: TCP may deliver it once the
// network heals, after the key had expired and the control plane had given
// the node's sessions up, renewing the key behind the node's back.
//
// KEYS: alive key. ARGV: ttl in ms, this heartbeat's value, the value of
// the node's last heartbeat that succeeded.
var heartbeatScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
if cur and cur == ARGV[3] then return 0 end
return 1
`)

// resolveScript returns the address of the node a session is on, and the
// node id and generation: {addr, node, gen, why}, or nil when unplaced.
// why is "no-map" when Redis holds no session map (it lost its data and
// the map is not rebuilt yet: addr, node and gen are empty), "unregistered"
// when the map names a node that has not registered since it was rebuilt
// (addr is empty), "" otherwise.
//
// ARGV: prefix, session.
var resolveScript = redis.NewScript(`
local p = ARGV[1]
local cur = redis.call('HGET', p..'smap', ARGV[2])
if not cur then
  if redis.call('EXISTS', p..'epoch') == 0 then return {'', '', '', 'no-map'} end
  return nil
end
local node, g = string.match(cur, '^([^\t]*)\t([^\t]*)')
local info = redis.call('HGET', p..'nodes', node) or ''
local addr = string.match(info, '^([^\t]*)') or ''
if addr == '' and info ~= '' then return {'', node, g, 'unregistered'} end
return {addr, node, g, ''}
`)

// snapshotScript reads every node in one call, with a fixed number of
// commands per node: {nodes hash (flat id, info pairs), alive flags in the
// same order, draining ids, used hash (flat), tenant counts in the same
// order, image flags in the same order}. A node's image flag is '1' when
// its set of held image keys holds any of the keys asked for.
//
// ARGV: prefix, tenant (may be empty), image keys (none or more).
var snapshotScript = redis.NewScript(`
local p, tenant = ARGV[1], ARGV[2]
local nodes = redis.call('HGETALL', p..'nodes')
local alive, tenants, holds = {}, {}, {}
if #nodes > 0 then
  local ks = {}
  for i = 1, #nodes, 2 do ks[#ks+1] = p..'alive:'..nodes[i] end
  local vals = redis.call('MGET', unpack(ks))
  for i = 1, #ks do
    if vals[i] then alive[i] = '1' else alive[i] = '0' end
    if tenant ~= '' then
      tenants[i] = redis.call('HGET', p..'tenants:'..nodes[2*i-1], tenant) or '0'
    end
    if #ARGV > 2 then
      holds[i] = '0'
      for j = 3, #ARGV do
        if redis.call('SISMEMBER', p..'images:'..nodes[2*i-1], ARGV[j]) == 1 then
          holds[i] = '1'
          break
        end
      end
    end
  end
end
return {nodes, alive, redis.call('SMEMBERS', p..'draining'), redis.call('HGETALL', p..'used'), tenants, holds}
`)

// restoreScript puts a session back in the map on its node, whatever the
// node's liveness and capacity: the session records say it runs there. A
// node that is not registered gets a placeholder entry (no address, no
// capacity) so the watcher sees it and, if it never heartbeats, marks its
// sessions lost. A session already in the map is left as it is. Returns 1
// if it restored.
//
// ARGV: prefix, node, session, cpu, mem, tenant.
var restoreScript = redis.NewScript(`
local p, node, sid, tenant = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local cpu, mem = tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', p..'smap', sid) == 1 then return 0 end
if redis.call('HEXISTS', p..'nodes', node) == 0 then
  redis.call('HSET', p..'nodes', node, '\t0\t0\t0\tnull')
end
redis.call('HINCRBY', p..'used', node..'\ts', 1)
redis.call('HINCRBY', p..'used', node..'\tc', cpu)
redis.call('HINCRBY', p..'used', node..'\tm', mem)
redis.call('HINCRBY', p..'tenants:'..node, tenant, 1)
redis.call('SADD', p..'sessions:'..node, sid)
local g = redis.call('INCR', p..'gen')
redis.call('HSET', p..'smap', sid, node..'\t'..g..'\t'..cpu..'\t'..mem..'\t'..tenant)
return 1
`)

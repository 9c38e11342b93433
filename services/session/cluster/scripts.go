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
local cap = redis.call('HMGET', p..'node:'..node, 'sessions', 'cpu', 'mem')
if not cap[1] then return {'unknown'} end
local used = redis.call('HMGET', p..'used:'..node, 'sessions', 'cpu', 'mem')
local us, uc, um = tonumber(used[1] or '0'), tonumber(used[2] or '0'), tonumber(used[3] or '0')
local cs, cc, cm = tonumber(cap[1]), tonumber(cap[2] or '0'), tonumber(cap[3] or '0')
if us + 1 > cs then return {'full', 'sessions'} end
if cc > 0 and uc + cpu > cc then return {'full', 'cpu'} end
if cm > 0 and um + mem > cm then return {'full', 'memory'} end
redis.call('HINCRBY', p..'used:'..node, 'sessions', 1)
redis.call('HINCRBY', p..'used:'..node, 'cpu', cpu)
redis.call('HINCRBY', p..'used:'..node, 'mem', mem)
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
redis.call('HINCRBY', p..'used:'..node, 'sessions', -1)
redis.call('HINCRBY', p..'used:'..node, 'cpu', 0 - tonumber(cpu))
redis.call('HINCRBY', p..'used:'..node, 'mem', 0 - tonumber(mem))
if redis.call('HINCRBY', p..'tenants:'..node, tenant, -1) <= 0 then
  redis.call('HDEL', p..'tenants:'..node, tenant)
end
redis.call('SREM', p..'sessions:'..node, sid)
redis.call('HDEL', p..'smap', sid)
return 1
`)

// heartbeatScript renews a node's heartbeat and returns 1 if it had expired
// (or never existed): the node was considered gone and must reconcile.
//
// KEYS: alive key. ARGV: ttl in ms, boot id.
var heartbeatScript = redis.NewScript(`
local existed = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
if existed == 1 then return 0 end
return 1
`)

// resolveScript returns the address of the node a session is on, and the
// node id and generation: {addr, node, gen}, or nil when unplaced.
//
// ARGV: prefix, session.
var resolveScript = redis.NewScript(`
local cur = redis.call('HGET', ARGV[1]..'smap', ARGV[2])
if not cur then return nil end
local node, g = string.match(cur, '^([^\t]*)\t([^\t]*)')
local addr = redis.call('HGET', ARGV[1]..'node:'..node, 'address') or ''
return {addr, node, g}
`)

// snapshotScript reads every registered node in one call: for each, a flat
// run of id, address, sessions, cpu, mem, labels, alive, draining, used
// sessions, used cpu, used mem, tenant sessions ("" for a node whose
// registration expired).
//
// ARGV: prefix, tenant (may be empty).
var snapshotScript = redis.NewScript(`
local p, tenant = ARGV[1], ARGV[2]
local ids = redis.call('SMEMBERS', p..'nodes')
local out = {}
for _, id in ipairs(ids) do
  local info = redis.call('HMGET', p..'node:'..id, 'address', 'sessions', 'cpu', 'mem', 'labels')
  local used = redis.call('HMGET', p..'used:'..id, 'sessions', 'cpu', 'mem')
  local t = '0'
  if tenant ~= '' then t = redis.call('HGET', p..'tenants:'..id, tenant) or '0' end
  out[#out+1] = id
  out[#out+1] = info[1] or ''
  out[#out+1] = info[2] or '0'
  out[#out+1] = info[3] or '0'
  out[#out+1] = info[4] or '0'
  out[#out+1] = info[5] or ''
  out[#out+1] = tostring(redis.call('EXISTS', p..'alive:'..id))
  out[#out+1] = tostring(redis.call('SISMEMBER', p..'draining', id))
  out[#out+1] = used[1] or '0'
  out[#out+1] = used[2] or '0'
  out[#out+1] = used[3] or '0'
  out[#out+1] = t
end
return out
`)

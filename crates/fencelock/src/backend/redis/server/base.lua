-- The first part of every lock script (after the part of its common case that defines
-- nothing, if it has one): what a lock is, and the helpers every other part needs. The other
-- parts (holds.lua, tokens.lua, queue.lua) follow, each after the parts it uses (queue.lua
-- last); scripts.rs lists each script's parts.
--
-- A lock is a hash. Its holder's field lists the holds it has, one attempt id per hold
-- (space-separated, oldest first): a release, renewal or undo names the hold it belongs to,
-- and does nothing when that hold is gone. '=token' is the holding's fencing token.
-- Every script reads (and so type-checks) each key, and checks the fencing counter, before
-- it changes anything: a script that fails leaves no partial change behind. The one
-- exception is the counter's `SET ... GET` in acquire_free.lua, which says why it is harmless.
--
-- Defining a Lua function costs the server at every call of a script (a script's body runs
-- whole each time). So the common cases, a free lock taken and a lone hold given back, run
-- before any helper is defined (acquire_free.lua, release_last.lua, the first parts of their
-- scripts), and a script includes only the parts it needs.

-- Fails the script with an error that names `key`.
local function fail(key, what)
  error({err = 'WRONGTYPE ' .. key .. ' ' .. what})
end

-- Runs a reading command on `key`; a key of the wrong type fails the script, naming the key.
local function read(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      fail(key, 'holds the wrong kind of value for a lock')
    end
    error(reply)
  end
  return reply
end

-- The lock hash's field '=q' says that its wait queue may have entries: every attempt that
-- takes a place while the lock is held sets it, and a handover keeps it while places are
-- left. A release reads it with the holder's field (one HMGET) and touches the queue only
-- when it is set: an uncontended release runs no queue command.
local QUEUED = '=q'

-- An election's leader advertises its value in the lock hash's field '=v' (a mutex's holder
-- has none). A change of leader of an election (one taken, handed over, given back) is
-- published as '=leader' on the release channel, where observers listen; waiters ignore it.
local ELECTED, LEADER = '=v', '=leader'

-- Publishes a release message (SPUBLISH on a Cluster: sharded pub/sub reaches the waiters
-- on the lock's shard).
local function publish(channel, sharded, message)
  if sharded then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

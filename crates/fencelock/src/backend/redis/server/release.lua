-- Give back one hold of a lock (after release_last.lua, which read `fields` and gave back a
-- lone hold in the common case, base.lua, holds.lua, tokens.lua and queue.lua); at zero,
-- hand the lock to the first waiter in the queue that still has time left, or delete it.
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter, KEYS[3]: the wait queue,
-- KEYS[4]: the waiting owners (see acquire.lua)
-- ARGV[1]: owner id, ARGV[2]: release channel,
-- ARGV[3]: the hold to give back (the attempt id that took it; also gives up the place that
--          attempt took in the queue), or '' for the owner's newest hold (a release by owner
--          id, without a guard; an owner that holds nothing then leaves the queue),
-- ARGV[4]: the counter's horizon in ms (its TTL after the token a handover issues),
-- ARGV[5]: the release message (absent or '': the owner id, published only when a waiter of
--          the queue may need it; given (RedLock, whose servers keep no queue): always
--          published), ARGV[6]: 'S' to publish with SPUBLISH (Redis Cluster).
-- Returns the holds left (0: released), or -1 when that hold (or the owner) held nothing.
local message = ARGV[5]
local k = {lock = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiting = KEYS[4],
  channel = ARGV[2], sharded = ARGV[6] == 'S', always = message ~= nil and message ~= '',
  horizon = ARGV[4]}
local owner, id = ARGV[1], ARGV[3]
if not k.always then
  message = owner
end
if fields.err then
  read('HMGET', k.lock, owner, QUEUED) -- fails, naming the key
end
if fields[4] then -- a read-write lock or a semaphore (family.lua)
  return family_release(k, owner, id)
end
local list, marked = fields[1], fields[2]
k.elected = fields[3]
if id == '' then
  if not list then
    -- An owner that gives up waiting (e.g. a cancelled process) leaves the queue. Its place
    -- may outlive the lock (no marker then): look at the queue itself.
    if queue_length(k) > 0 then
      leave_queue(k, owner)
    end
    return -1
  end
  id = string.match(list, '(%S+)$')
end
if not (list and has(list, id)) then
  -- Not a hold: only a place in the queue may be left to give up (a wait that ended), and
  -- it may outlive the lock's marker.
  marked = true
end
local left = give_back(k, owner, list, id, message, marked)
if not left then
  return -1
end
return count(left)

-- Give back one hold of a lock (after lib.lua); at zero, hand the lock to the first waiter in
-- the queue that still has time left, or delete it.
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter, KEYS[3]: the wait queue,
-- KEYS[4]: the waiting owners (see acquire.lua)
-- ARGV[1]: owner id, ARGV[2]: release channel,
-- ARGV[3]: the hold to give back (the attempt id that took it; also gives up the place that
--          attempt took in the queue), or '' for the owner's newest hold (a release by owner
--          id, without a guard; an owner that holds nothing then leaves the queue),
-- ARGV[4]: the release message (absent or '' for the owner id), ARGV[5]: 'S' to publish with
--          SPUBLISH (Redis Cluster).
-- Returns the holds left (0: released), or -1 when that hold (or the owner) held nothing.
local k = {lock = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiting = KEYS[4],
  channel = ARGV[2], sharded = ARGV[5] == 'S'}
local owner, id = ARGV[1], ARGV[3]
local message = ARGV[4]
if message == nil or message == '' then
  message = owner
end
local list = read('HGET', k.lock, owner)
if id == '' then
  if not list then
    -- An owner that gives up waiting (e.g. a cancelled process) leaves the queue.
    if queue_length(k) > 0 then
      leave_queue(k, owner)
    end
    return -1
  end
  id = string.match(list, '(%S+)$')
end
local left = give_back(k, owner, list, id, message)
if not left then
  return -1
end
return count(left)

-- Give back one hold of a lock; at zero, hand it to the first waiter in the queue that still
-- has lease left, or delete it.
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter, KEYS[3]: the wait queue,
-- KEYS[4]: the waiting owners (see acquire.lua)
-- ARGV[1]: owner id, ARGV[2]: release channel,
-- ARGV[3]: '' for a plain release, or an attempt id: then release only if that attempt is the
--          last one that acquired (undoing an acquire whose reply was lost, or a wait given up,
--          whose place in the queue goes too),
-- ARGV[4]: the release message (absent or '' for the owner id), ARGV[5]: 'S' to publish with
--          SPUBLISH (Redis Cluster: sharded pub/sub reaches the waiters on the lock's shard).
-- Returns the holds left (0: released), or -1 when the owner does not hold it.
local owner = ARGV[1]
local function publish(message)
  if ARGV[5] == 'S' then
    redis.call('SPUBLISH', ARGV[2], message)
  else
    redis.call('PUBLISH', ARGV[2], message)
  end
end
if ARGV[3] ~= '' then
  local place = redis.call('HGET', KEYS[4], owner)
  if place and string.match(place, '^%d+') == ARGV[3] then
    redis.call('HDEL', KEYS[4], owner)
    redis.call('LREM', KEYS[3], 1, owner)
  end
  if redis.call('HGET', KEYS[1], '=attempt') ~= ARGV[3] then
    return -1
  end
end
local held = tonumber(redis.call('HGET', KEYS[1], owner))
if not held then
  -- An owner that gives up waiting (e.g. a process cancelled while it waited) leaves the queue.
  if redis.call('HDEL', KEYS[4], owner) == 1 then
    redis.call('LREM', KEYS[3], 1, owner)
  end
  return -1
end
if held > 1 then
  return redis.call('HINCRBY', KEYS[1], owner, -1)
end
redis.call('DEL', KEYS[1])
-- Hand over in arrival order, skipping places whose lease ran out (waiters that died or gave
-- up without saying so). The new holder gets what is left of its place's window, counted from
-- its request, so its own deadline (measured from sending that request) comes first; its
-- watchdog then renews to the full lease.
local next = redis.call('LPOP', KEYS[3])
while next do
  local place = redis.call('HGET', KEYS[4], next)
  redis.call('HDEL', KEYS[4], next)
  if place then
    local attempt, window, since = string.match(place, '^(%d+) (%d+) (%d+)$')
    local now = now_us()
    local left = math.floor((tonumber(since) + tonumber(window) * 1000 - now) / 1000)
    if left >= 2 then
      local text = next_token(KEYS[2], now)
      redis.call('HSET', KEYS[1], next, 1, '=token', text, '=attempt', attempt)
      redis.call('PEXPIRE', KEYS[1], left)
      publish('=grant ' .. attempt .. ' ' .. text)
      return 0
    end
  end
  next = redis.call('LPOP', KEYS[3])
end
local message = ARGV[4]
if message == nil or message == '' then
  message = owner
end
publish(message)
return 0

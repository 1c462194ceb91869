-- Acquire or re-enter a lock in one round trip.
-- KEYS[1]: the lock hash (owner -> hold count, '=token', '=attempt')
-- KEYS[2]: the fencing counter (no TTL, outlives the lock)
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: attempt id,
-- ARGV[4]: absent to base a new token on this server's clock, or a token proposed by the
--          client (RedLock: every server of a majority should issue the same token)
-- Returns {1, hold count, token} when acquired, {0, remaining lease in ms} when held by another.
local lease = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not redis.call('HGET', KEYS[1], ARGV[1]) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('HSET', KEYS[1], '=attempt', ARGV[3])
  -- Never shorten the lease: another guard of this owner may rely on the longer one.
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  return {1, count, redis.call('HGET', KEYS[1], '=token')}
end
-- The token is max(last + 1, a clock in us): a counter lost in a restart without persistence,
-- or stale on a promoted replica, cannot make tokens go backwards.
local clock = ARGV[4] and tonumber(ARGV[4])
if not clock then
  local now = redis.call('TIME')
  clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local token = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1
if token < clock then
  token = clock
end
-- '%.0f' because Lua's tostring would print 16-digit numbers in exponent form.
local text = string.format('%.0f', token)
redis.call('SET', KEYS[2], text)
redis.call('HSET', KEYS[1], ARGV[1], 1, '=token', text, '=attempt', ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, 1, text}

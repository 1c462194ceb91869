-- Raise a lock's fencing counter (and the holder's recorded token) to a token chosen across
-- servers (RedLock): after this, the token is on this server too.
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter
-- ARGV[1]: owner id, ARGV[2]: the token
-- Returns 1 when the counter is at least the token afterwards.
local token = tonumber(ARGV[2])
if (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) < token then
  redis.call('SET', KEYS[2], ARGV[2])
end
if redis.call('HGET', KEYS[1], ARGV[1]) then
  redis.call('HSET', KEYS[1], '=token', ARGV[2])
end
return 1

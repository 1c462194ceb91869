-- Raise a lock's fencing counter (and the holder's recorded token) to a token chosen across
-- servers (RedLock): after this, the token is on this server too (after base.lua and
-- tokens.lua).
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter
-- ARGV[1]: owner id, ARGV[2]: the token (decimal), ARGV[3]: the counter's horizon in ms
-- Returns 1 when the counter is at least the token afterwards.
check_counter(KEYS[2])
local last = string.gsub(redis.call('GET', KEYS[2]) or '0', '^0+(%d)', '%1')
local held = read('HGET', KEYS[1], ARGV[1])
if less(last, ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
if held then
  redis.call('HSET', KEYS[1], '=token', ARGV[2])
end
return 1

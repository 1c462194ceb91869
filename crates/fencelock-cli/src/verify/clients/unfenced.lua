-- The negative control's write: the value is written whatever the token (no fencing, as a
-- plain SET would), while the highest token is kept as the fenced register keeps it, so that
-- the reply says whether the fenced register would have refused this write.
-- KEYS[1]: the register (the fields 'value' and 'token' of fencelock's FencedRegister).
-- ARGV[1]: the writer's token (decimal), ARGV[2]: the value.
-- Returns 1 when the write was stale (a higher token had been written), else 0.
-- Tokens are compared as Lua numbers (doubles): exact below 2^53, which every token of a
-- verify run is (Redis tokens are microseconds, ZooKeeper's are counters); a larger one is
-- an error, never a wrong answer.
local limit = 9007199254740992
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token >= limit or highest >= limit then
  return redis.error_reply('token above 2^53: cannot compare exactly')
end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
if token < highest then
  return 1
end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return 0

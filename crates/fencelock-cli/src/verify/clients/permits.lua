-- A permit holder's write (verify --primitive semaphore of N). The register keeps the N
-- highest tokens it took, in a sorted set beside the value, and refuses a token below all N
-- of them: N permits granted after this one have written since, so this one cannot still be
-- one of the N (its lease ended). The value and the latest token go in the fields 'value'
-- and 'token', as fencelock's FencedRegister keeps them, so that it reads them.
-- KEYS[1]: the register, KEYS[2]: its tokens' sorted set.
-- ARGV[1]: the token (decimal), ARGV[2]: the value, ARGV[3]: N,
-- ARGV[4]: '1' fenced, '0' the negative control (written anyway; the reply says if stale).
-- Returns {accepted (0 or 1), stale (0 or 1)}.
-- Tokens are scores (doubles): exact below 2^53 (see unfenced.lua).
local limit = 9007199254740992
local token = tonumber(ARGV[1])
local n = tonumber(ARGV[3])
if token >= limit then
  return redis.error_reply('token above 2^53: cannot compare exactly')
end
local above = redis.call('ZCOUNT', KEYS[2], '(' .. ARGV[1], '+inf')
local stale = 0
if above >= n then
  stale = 1
  if ARGV[4] == '1' then
    return {0, 1}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
redis.call('ZADD', KEYS[2], token, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(n + 1))
return {1, stale}

-- The demo's protected record: a write is accepted only with a fencing token at least as high
-- as the highest seen, and only if the value is still the one the writer read.
-- KEYS[1]: value, KEYS[2]: highest token, KEYS[3]: accepted tokens (list),
-- KEYS[4]: stale writes rejected, KEYS[5]: violations
-- ARGV[1]: token, ARGV[2]: the value the writer read, ARGV[3]: the new value
-- Tokens are decimal text compared exactly (Lua numbers are doubles, exact only below 2^53;
-- a u64 token is written without leading zeros): the shorter is smaller, else the first
-- differing digit decides.
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local token = ARGV[1]
local highest = redis.call('GET', KEYS[2]) or '0'
if less(token, highest) then
  redis.call('INCR', KEYS[4])
  return 'stale'
end
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[2] then
  -- Another writer with a valid token got in between this writer's read and write: the lock
  -- did not exclude it.
  redis.call('INCR', KEYS[5])
  return 'conflict'
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[1])
return 'ok'

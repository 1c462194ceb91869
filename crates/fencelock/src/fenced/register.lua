-- A fenced register: a write is accepted only if its token is at least the highest the
-- register has accepted, and the token is recorded with the value, in one step.
-- KEYS[1]: the register, a hash with the fields 'value' and 'token'.
-- ARGV[1]: the writer's token (decimal, no leading zeros), ARGV[2]: the value.
-- Tokens are compared as decimal strings, not Lua numbers (doubles), so that every u64 token
-- compares exactly.
local function at_least(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a >= b
end

local highest = redis.call('HGET', KEYS[1], 'token')
if highest and not at_least(ARGV[1], highest) then
  return {'rejected', highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {'accepted', ARGV[1]}

-- An election's leader (after base.lua): the lock's holder, its token and its value.
-- KEYS[1]: the lock hash
-- Returns {token, value or false (a mutex's holder advertises none), remaining lease in ms
-- (-1: no expiry)}, or {} when nobody holds the lock.
local fields = read('HMGET', KEYS[1], '=token', ELECTED)
if not fields[1] then
  return {}
end
return {fields[1], fields[2], redis.call('PTTL', KEYS[1])}

-- An election's leader advertises another value (after base.lua and holds.lua), only while
-- its hold is the lock's: the '=v' field, and '=leader' published for observers.
-- KEYS[1]: the lock hash
-- ARGV[1]: owner id, ARGV[2]: the hold (attempt id) that leads, ARGV[3]: the value,
-- ARGV[4]: the release channel, ARGV[5]: 'S' to publish with SPUBLISH
-- Returns 1, or -1 (nothing changed) when that hold is gone.
local list = read('HGET', KEYS[1], ARGV[1])
if not list or not has(list, ARGV[2]) then
  return -1
end
redis.call('HSET', KEYS[1], ELECTED, ARGV[3])
publish(ARGV[4], ARGV[5] == 'S', LEADER)
return 1

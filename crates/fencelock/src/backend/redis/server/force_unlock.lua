-- Delete a lock whatever its owner, and its wait queue; wake its waiters (they queue again).
-- KEYS[1]: the lock hash, KEYS[2], KEYS[3]: the wait queue and the waiting owners
-- ARGV[1]: release channel; ARGV[2]: 'S' to publish with SPUBLISH
-- Returns the deleted hash as {field, value, ...}, empty when there was no lock.
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if ARGV[2] == 'S' then
    redis.call('SPUBLISH', ARGV[1], '=forced')
  else
    redis.call('PUBLISH', ARGV[1], '=forced')
  end
end
return fields

-- Delete a lock whatever its owner, and wake its waiters.
-- KEYS[1]: the lock hash; ARGV[1]: release channel
-- Returns the deleted hash as {field, value, ...}, empty when there was no lock.
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], '=forced')
end
return fields

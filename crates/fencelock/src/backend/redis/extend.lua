-- Renew or extend a lease, only for its owner, and never shorten it.
-- KEYS[1]: the lock hash
-- ARGV[1]: owner id, ARGV[2]: lease in ms
-- Returns the remaining lease in ms after the call, or -1 when the owner does not hold it.
if not redis.call('HGET', KEYS[1], ARGV[1]) then
  return -1
end
local lease = tonumber(ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
  ttl = lease
end
return ttl

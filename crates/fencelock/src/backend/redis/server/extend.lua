-- Renew or extend a lease (after base.lua and holds.lua), only while the hold is live, and
-- never shorten it.
-- KEYS[1]: the lock hash
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: the hold (attempt id) renewing it
-- Returns the remaining lease in ms after the call, or -1 when that hold is gone.
local list = read('HGET', KEYS[1], ARGV[1])
if not list or not has(list, ARGV[3]) then
  return -1
end
local lease = tonumber(ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < lease then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = lease
end
return ttl

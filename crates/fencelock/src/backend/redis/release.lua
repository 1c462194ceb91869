-- Give back one hold of a lock.
-- KEYS[1]: the lock hash
-- ARGV[1]: owner id, ARGV[2]: release channel,
-- ARGV[3]: '' for a plain release, or an attempt id: then release only if that attempt is the
--          last one that acquired (undoing an acquire whose reply was lost),
-- ARGV[4]: the release message (absent or '' for the owner id), ARGV[5]: 'S' to publish with
--          SPUBLISH (Redis Cluster: sharded pub/sub reaches the waiters on the lock's shard).
-- Returns the holds left (0: released and deleted), or -1 when the owner does not hold it.
if ARGV[3] ~= '' and redis.call('HGET', KEYS[1], '=attempt') ~= ARGV[3] then
  return -1
end
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not held then
  return -1
end
if held > 1 then
  return redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
end
redis.call('DEL', KEYS[1])
local message = ARGV[4]
if message == nil or message == '' then
  message = ARGV[1]
end
if ARGV[5] == 'S' then
  redis.call('SPUBLISH', ARGV[2], message)
else
  redis.call('PUBLISH', ARGV[2], message)
end
return 0

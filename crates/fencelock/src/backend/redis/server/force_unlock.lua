-- Delete a lock whatever its owner, and its wait queue; wake its waiters (they queue again),
-- and tell each holder's client.
-- KEYS[1]: the lock hash, KEYS[2], KEYS[3]: the wait queue and the waiting owners
-- ARGV[1]: release channel; ARGV[2]: 'S' to publish with SPUBLISH
-- ARGV[3]: the prefix of the clients' own channels, or '' (Redis Cluster: a client's channel
--          lives in another slot than the lock). A client subscribes to the prefix followed by
--          its client id when it connects, and its owner ids are '<client id>:<n>' (the CLI's
--          '<client id>:<host>/<pid>/...'): each holder's client hears
--          '=forced <lock key> <hold id> ...' there, at once (an owner id that does not start
--          with '<hex>:' is told by its next renewal).
-- Returns the deleted hash as {field, value, ...}, empty when there was no lock.
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if ARGV[2] == 'S' then
    redis.call('SPUBLISH', ARGV[1], '=forced')
  else
    redis.call('PUBLISH', ARGV[1], '=forced')
  end
  if (ARGV[3] or '') ~= '' then
    for i = 1, #fields, 2 do
      local client = string.match(fields[i], '^(%x+):')
      if client then
        redis.call('PUBLISH', ARGV[3] .. client, '=forced ' .. KEYS[1] .. ' ' .. fields[i + 1])
      end
    end
  end
end
return fields

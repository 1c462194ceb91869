-- Removes one holding, whatever its hold ids: one permit of a semaphore, one reader (or the
-- writer) of a read-write lock, a mutex's holder or an election's leader. The wait queue goes
-- too: its waiters hear '=forced' and queue again, so that the rule is applied afresh with
-- the holding gone (a writer that waited for that reader, a waiter for that permit). The
-- holder's client hears '=forced <lock key> <hold ids>' on its own channel at once, as with
-- force_unlock.lua, whose arguments these follow.
-- KEYS[1]: the lock hash, KEYS[2], KEYS[3]: the wait queue and the waiting owners
-- ARGV[1]: release channel; ARGV[2]: 'S' to publish with SPUBLISH
-- ARGV[3]: the prefix of the clients' own channels, or '' (Redis Cluster)
-- ARGV[4]: the owner id of the holding to remove
-- Returns {owner, hold ids} of the removed holding, or {} when that owner held nothing.
local ids = redis.call('HGET', KEYS[1], ARGV[4])
if not ids then
  return {}
end
local left = 0
if redis.call('HEXISTS', KEYS[1], '=k') == 1 then
  redis.call('HDEL', KEYS[1], ARGV[4], '=h:' .. ARGV[4])
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 1) ~= '=' then
      left = left + 1
    end
  end
end
if left == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HDEL', KEYS[1], '=q')
end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call(ARGV[2] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[1], '=forced')
local client = string.match(ARGV[4], '^(%x+):')
if client and (ARGV[3] or '') ~= '' then
  redis.call('PUBLISH', ARGV[3] .. client, '=forced ' .. KEYS[1] .. ' ' .. ids)
end
return {ARGV[4], ids}

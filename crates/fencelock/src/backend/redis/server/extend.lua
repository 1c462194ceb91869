-- Renew or extend a lease (after base.lua and holds.lua), only while the hold is live, and
-- never shorten it. A read-write lock's or a semaphore's holding (family.lua) has its own
-- deadline in its '=h:<owner>' field: it is renewed there (from the server's clock), and a
-- holding past it is gone (the next family script drops it) even before anyone dropped it.
-- KEYS[1]: the lock hash
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: the hold (attempt id) renewing it
-- Returns the remaining lease in ms after the call, or -1 when that hold is gone.
local fields = read('HMGET', KEYS[1], ARGV[1], '=k', '=h:' .. ARGV[1])
local list = fields[1]
if not list or not has(list, ARGV[3]) then
  return -1
end
local lease = tonumber(ARGV[2])
if fields[2] then
  local token, since, term, writes = string.match(fields[3] or '', '^(%d+) (%d+) (%d+)(.*)$')
  if not token then
    return -1
  end
  local now = redis.call('TIME')
  local now_us = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local now_ms = tonumber(string.sub(now_us, 1, #now_us - 3))
  local deadline = math.floor(tonumber(since) / 1000) + tonumber(term)
  if deadline <= now_ms then
    return -1
  end
  if deadline < now_ms + lease then
    deadline = now_ms + lease
    redis.call('HSET', KEYS[1], '=h:' .. ARGV[1], token .. ' ' .. now_us .. ' ' .. ARGV[2] .. writes)
  end
  if redis.call('PTTL', KEYS[1]) < deadline - now_ms then
    redis.call('PEXPIRE', KEYS[1], deadline - now_ms)
  end
  return deadline - now_ms
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < lease then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = lease
end
return ttl

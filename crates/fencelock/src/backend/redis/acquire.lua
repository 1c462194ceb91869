-- Acquire or re-enter a lock in one round trip.
-- KEYS[1]: the lock hash (owner -> hold count, '=token', '=attempt')
-- KEYS[2]: the fencing counter (no TTL, outlives the lock)
-- KEYS[3]: the wait queue (owners in arrival order), KEYS[4]: the waiting owners
--          (owner -> 'attempt window_ms since_us'), both read by release.lua to hand over;
--          given only with ARGV[5] or ARGV[6]
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: attempt id,
-- ARGV[4]: '' to base a new token on this server's clock, or a token proposed by the client
--          (RedLock: every server of a majority should issue the same token)
-- ARGV[5]: '' not to queue, or a place window in ms: when the lock is held, take (or renew)
--          a place in the wait queue, valid for that long from now (the caller is subscribed
--          to the release channel and will be handed the lock)
-- ARGV[6]: the attempt id of the caller's place in the queue, or '': a handover to it that the
--          caller did not hear of (lost message) is claimed by this attempt
-- Returns {1, hold count, token} when acquired, {0, remaining lease in ms} when held by another.
local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local claim = ARGV[6] or ''
if redis.call('EXISTS', KEYS[1]) == 1 then
  local held = redis.call('HGET', KEYS[1], owner)
  if not held then
    local window = tonumber(ARGV[5])
    if window then
      if redis.call('HEXISTS', KEYS[4], owner) == 0 then
        redis.call('RPUSH', KEYS[3], owner)
      end
      -- The place counts from now: release.lua hands over only what is left of the window,
      -- which the caller measures from when it sent this request.
      redis.call('HSET', KEYS[4], owner,
        ARGV[3] .. ' ' .. ARGV[5] .. ' ' .. string.format('%.0f', now_us()))
      for i = 3, 4 do
        if redis.call('PTTL', KEYS[i]) < window then
          redis.call('PEXPIRE', KEYS[i], window)
        end
      end
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local count
  if claim ~= '' and redis.call('HGET', KEYS[1], '=attempt') == claim then
    count = tonumber(held) -- the handover this caller missed: no new hold
  else
    count = redis.call('HINCRBY', KEYS[1], owner, 1)
  end
  redis.call('HSET', KEYS[1], '=attempt', ARGV[3])
  -- Never shorten the lease: another guard of this owner may rely on the longer one.
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  return {1, count, redis.call('HGET', KEYS[1], '=token')}
end
if claim ~= '' and redis.call('HDEL', KEYS[4], owner) == 1 then
  redis.call('LREM', KEYS[3], 1, owner)
end
-- RedLock proposes a token that every server of a majority should issue alike.
local text = next_token(KEYS[2], tonumber(ARGV[4]) or now_us())
redis.call('HSET', KEYS[1], owner, 1, '=token', text, '=attempt', ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, 1, text}

-- Acquire or re-enter a lock in one round trip (after acquire_free.lua, which took a free lock
-- in the common case and read `pttl` otherwise, base.lua, tokens.lua, holds.lua and queue.lua).
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter (outlives the lock: it expires a
--          horizon after the last token it issued), KEYS[3]: the wait queue (owners in arrival
--          order), KEYS[4]: the waiting owners (owner -> 'attempt window_ms since_us client')
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: attempt id (this hold's id),
-- ARGV[4]: the counter's horizon in ms (its TTL after each token it issues)
-- ARGV[5]: '' to base a new token on this server's clock, or a token proposed by the client
--          (RedLock: every server of a majority should issue the same token)
-- The arguments after ARGV[5] are given only when queueing, claiming or giving attempts back.
-- ARGV[6]: '' not to queue, or a place window in ms: when the lock is held, take (or renew)
--          a place in the wait queue, valid for that long from now (the caller is subscribed
--          to the release channel and will be handed the lock, for one window from then,
--          which its watchdog renews)
-- ARGV[7]: the attempt id of the caller's place in the queue, or '': a handover to it that the
--          caller did not hear of (lost message) becomes this attempt's hold
-- ARGV[8]: the release channel, ARGV[9]: 'S' to publish with SPUBLISH
-- ARGV[10]: the caller's client id (given when queueing): a handover to the place it takes is
--          published on the release channel followed by ':<client id>', which only that
--          client hears
-- ARGV[11]: for an election's participant, '=' followed by the value it advertises (absent
--          for a mutex; an attempt id never starts with '='): while the participant waits it
--          follows its place ('attempt window_ms since_us client value'), while it leads it is
--          the lock's '=v' field, and a change of leader is published as '=leader' on the
--          release channel, for observers
-- ARGV[11 or 12...]: attempts of this owner that were given up (a lost reply, a dropped
--          future): their holds and places are given back first, so that none counts as a
--          re-entry of this one
-- Returns {1, hold count, token} when acquired, {0, remaining lease in ms} when held by another,
-- {-1, kind} when the name is used as another primitive: a read-write lock's or a semaphore's
-- (its '=k': family.lua, or its places), a mutex's for an election's participant and an
-- election's for a mutex's attempt (its '=v', or its places). A refusal changes nothing.
-- Sent again with the same attempt id, it changes nothing and gives the same answer.
local proposal, window, claim = ARGV[5] or '', tonumber(ARGV[6] or ''), ARGV[7] or ''
-- A proposed token means RedLock, whose servers keep no queue: release messages always go out.
local k = {lock = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiting = KEYS[4],
  channel = ARGV[8], sharded = ARGV[9] == 'S', always = proposal ~= '', horizon = ARGV[4]}
local owner, attempt = ARGV[1], ARGV[3]
local lease = tonumber(ARGV[2])
local value, gave_up = nil, 11
if string.byte(ARGV[11] or '') == 61 then -- '='
  value, gave_up = string.sub(ARGV[11], 2), 12
end
local list, marked = false, false
if pttl ~= -2 or #ARGV >= gave_up then
  local fields = read('HMGET', k.lock, owner, QUEUED, ELECTED, '=k')
  list, marked, k.elected = fields[1], fields[2], fields[3]
  if fields[4] then
    return {-1, fields[4]} -- a read-write lock's or a semaphore's ('=k': family.lua)
  end
  -- One name, one kind: an election's holding advertises a value ('=v', data in a field of
  -- its own), a mutex's none; each refuses the other.
  if pttl ~= -2 and (k.elected ~= false) ~= (value ~= nil) then
    return {-1, (k.elected and 'election') or 'mutex'}
  end
end
if #ARGV >= gave_up then
  -- Attempts this owner gave up go first; a holding they end may be handed over, and this
  -- attempt may then take a fresh token: the counter must be able to issue both. They may
  -- be places in the queue: look at the queue whatever the marker says.
  check_counter(k.fence)
  for i = gave_up, #ARGV do
    list = give_back(k, owner, list, ARGV[i], owner .. '#' .. ARGV[i], true) or list
    if list == '' then
      list = redis.call('HGET', k.lock, owner) -- ended: the lock may have been handed over
    end
  end
  pttl = redis.call('PTTL', k.lock)
  marked = pttl ~= -2 and redis.call('HGET', k.lock, QUEUED)
end
if list then
  if has(list, attempt) then
    return {1, count(list), redis.call('HGET', k.lock, '=token')}
  end
  if claim ~= '' and has(list, claim) then
    list = without(list, claim) -- the handover this caller missed: no second hold
  end
  if #ARGV >= 6 then -- an attempt that may hold a place re-enters: it leaves the queue
    queue_length(k)
    leave_queue(k, owner)
  end
  list = (list == '' and attempt) or (list .. ' ' .. attempt)
  if value then
    redis.call('HSET', k.lock, owner, list, ELECTED, value)
  else
    redis.call('HSET', k.lock, owner, list)
  end
  -- Never shorten the lease: another guard of this owner may rely on the longer one.
  if pttl < lease then
    redis.call('PEXPIRE', k.lock, ARGV[2])
  end
  return {1, count(list), redis.call('HGET', k.lock, '=token')}
end
if pttl ~= -2 then
  if window then
    queue_length(k)
    if not redis.call('HGET', k.waiting, owner) then
      redis.call('RPUSH', k.queue, owner)
    end
    if not marked then
      redis.call('HSET', k.lock, QUEUED, '1') -- the release looks at the queue
    end
    -- The place counts from now: it is handed the lock only within its window, and the
    -- handover says how long after now it came, which the caller adds to when it sent this
    -- request.
    local place = attempt .. ' ' .. ARGV[6] .. ' ' .. now_us() .. ' ' .. ARGV[10]
    if value then
      place = place .. ' ' .. value
    end
    redis.call('HSET', k.waiting, owner, place)
    for _, key in ipairs({k.queue, k.waiting}) do
      if redis.call('PTTL', key) < window then
        redis.call('PEXPIRE', key, window)
      end
    end
  end
  return {0, pttl}
end
local token = plan_token(k.fence, (proposal ~= '' and proposal) or now_us())
-- A free lock whose queue has places (acquire_free.lua came here): marked below, so that
-- its release hands it over.
local others = queue_length(k)
if others > 0 then
  -- The queue's places outlived its holding: the name is theirs. Every place was taken
  -- while a holding of its own kind held, so the first one tells the queue's kind (read
  -- from its fields, never from an election's value: parse_place).
  local place = redis.call('HGET', k.waiting, redis.call('LINDEX', k.queue, 0) or '')
  local _, _, _, _, kind = parse_place(place)
  if kind and kind ~= ((value and 'election') or 'mutex') then
    return {-1, kind}
  end
end
if leave_queue(k, owner) then
  others = others - 1
end
redis.call('SET', k.fence, token, 'PX', k.horizon)
if value and others > 0 then
  redis.call('HSET', k.lock, owner, attempt, '=token', token, QUEUED, '1', ELECTED, value)
elseif value then
  redis.call('HSET', k.lock, owner, attempt, '=token', token, ELECTED, value)
elseif others > 0 then
  redis.call('HSET', k.lock, owner, attempt, '=token', token, QUEUED, '1')
else
  redis.call('HSET', k.lock, owner, attempt, '=token', token)
end
redis.call('PEXPIRE', k.lock, ARGV[2])
if value then
  publish(k.channel, k.sharded, LEADER)
end
return {1, 1, token}

-- Prepended to every lock script: the rules they share, written once.
--
-- A lock is a hash. Its holder's field lists the holds it has, one attempt id per hold
-- (space-separated, oldest first): a release, renewal or undo names the hold it belongs to,
-- and does nothing when that hold is gone. '=token' is the holding's fencing token.
-- Every script reads (and so type-checks) each key, and checks the fencing counter, before
-- it changes anything: a script that fails leaves no partial change behind.

-- Fails the script with an error that names `key`.
local function fail(key, what)
  error({err = 'WRONGTYPE ' .. key .. ' ' .. what})
end

-- Runs a reading command on `key`; a key of the wrong type fails the script, naming the key.
local function read(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      fail(key, 'holds the wrong kind of value for a lock')
    end
    error(reply)
  end
  return reply
end

-- Holds: a list of attempt ids.
local function has(list, id)
  return string.find(' ' .. list .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

local function count(list)
  local n = 0
  for _ in string.gmatch(list, '%S+') do
    n = n + 1
  end
  return n
end

-- The list without `id` (without its newest hold when `id` is nil).
local function without(list, id)
  local kept, dropped = {}, false
  local ids = {}
  for each in string.gmatch(list, '%S+') do
    ids[#ids + 1] = each
  end
  for i = #ids, 1, -1 do
    if not dropped and (id == nil or ids[i] == id) then
      dropped = true
    else
      table.insert(kept, 1, ids[i])
    end
  end
  return table.concat(kept, ' ')
end

-- Fencing tokens are decimal text compared exactly: Lua numbers are doubles, exact only
-- below 2^53, and a counter written by another tool may be anywhere up to 2^64 - 1.
local MAX_TOKEN = '18446744073709551615'

local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local function succ(a)
  local i = #a
  while i >= 1 and string.byte(a, i) == 57 do -- '9'
    i = i - 1
  end
  -- The digits after i were all '9': they become '0'.
  local zeros = string.rep('0', #a - i)
  if i == 0 then
    return '1' .. zeros
  end
  return string.sub(a, 1, i - 1) .. string.char(string.byte(a, i) + 1) .. zeros
end

-- The server's clock in microseconds, as decimal text (no number conversions: TIME answers
-- text, and the microseconds are padded to six digits).
local function now_us()
  local now = redis.call('TIME')
  return now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
end

-- The next token, max(last + 1, floor), where `floor` is a clock in us or a token proposed
-- by the client (RedLock): a counter lost in a restart without persistence, or stale on a
-- promoted replica, cannot make tokens go backwards. Only reads: the caller stores it with
-- SET once every check has passed. Fails, changing nothing, when the counter is not a
-- number or the tokens are used up.
local function plan_token(counter, floor)
  local last = read('GET', counter) or '0'
  if not string.match(last, '^%d+$') then
    error({err = 'FENCE ' .. counter .. ' does not hold a fencing counter'})
  end
  if string.byte(last, 1) == 48 and #last > 1 then -- leading zeros (written by hand)
    last = string.gsub(last, '^0+(%d)', '%1')
  end
  if less(MAX_TOKEN, last) or last == MAX_TOKEN then
    error({err = 'FENCE ' .. counter .. ' has issued the highest fencing token (2^64 - 1)'})
  end
  local token = succ(last)
  if less(token, floor) then
    token = floor
  end
  return token
end

-- Publishes a release message (SPUBLISH on a Cluster: sharded pub/sub reaches the waiters
-- on the lock's shard).
local function publish(k, message)
  if k.sharded then
    redis.call('SPUBLISH', k.channel, message)
  else
    redis.call('PUBLISH', k.channel, message)
  end
end

-- Fails, changing nothing, unless the counter can issue another token (read before a
-- release that may hand the lock over has changed anything).
local function check_counter(counter)
  plan_token(counter, '0')
end

-- How many entries the wait queue has (type-checks it and the places); 0 without queue keys.
local function queue_length(k)
  if not k.queue then
    return 0
  end
  local n = read('LLEN', k.queue)
  if n > 0 then
    read('HLEN', k.waiting)
  end
  return n
end

-- The lock hash's field '=q' says that its wait queue may have entries: every attempt that
-- takes a place while the lock is held sets it, and a handover keeps it while places are
-- left. A release reads it with the holder's field (one HMGET) and touches the queue only
-- when it is set: an uncontended release runs no queue command.
local QUEUED = '=q'

-- The wait queue's length when the lock's marker `marked` says it may have entries, else 0.
local function marked_length(k, marked)
  if marked then
    return queue_length(k)
  end
  return 0
end

-- Parses a place ('attempt window_ms since_us lease_ms'; places of earlier versions have no
-- lease): the attempt, the window, when it was taken, and the lease to hand over, if any.
local function parse_place(place)
  local attempt, window, since, lease = string.match(place or '', '^(%d+) (%d+) (%d+) ?(%d*)$')
  return attempt, window, since, tonumber(lease)
end

-- Removes `owner`'s place in the wait queue (only the place taken by attempt `id`, if given).
-- The caller has type-checked the queue keys. Returns whether a place was removed.
local function leave_queue(k, owner, id)
  if not k.waiting then
    return false
  end
  local place = read('HGET', k.waiting, owner)
  if place and (id == nil or string.match(place, '^%d+') == id) then
    redis.call('HDEL', k.waiting, owner)
    redis.call('LREM', k.queue, 1, owner)
    return true
  end
  return false
end

-- Ends a holding: hands the lock to the first place in the queue whose window has time left
-- (publishing '=grant <attempt> <token> <elapsed_ms>'), or deletes it. The new holder gets its
-- whole lease from now, and `elapsed_ms` (the time since its place was taken, rounded down)
-- tells it how far its request lies behind the handover, so that its own deadline (measured
-- from sending that request, plus elapsed_ms, plus the lease) comes first. A place of an
-- earlier version (no lease) gets what is left of its window, and the message has no
-- elapsed_ms. A release message (`message`) is published only when someone may be waiting
-- for it: a waiter of this server's queue (`queued` > 0, all places past their windows), or
-- any subscriber when the server keeps no queue for the lock (`k.always`: RedLock).
-- `queued`: the queue's length, read (with the counter checked) before any change.
local function end_holding(k, queued, message)
  redis.call('DEL', k.lock)
  local now = queued > 0 and now_us()
  local left_in_queue = queued
  while left_in_queue > 0 do
    local next = redis.call('LPOP', k.queue)
    if not next then
      break
    end
    left_in_queue = left_in_queue - 1
    local place = redis.call('HGET', k.waiting, next)
    redis.call('HDEL', k.waiting, next)
    local attempt, window, since, lease = parse_place(place)
    if attempt then
      local left = math.floor((tonumber(since) + tonumber(window) * 1000 - tonumber(now)) / 1000)
      if left >= 2 then
        local token = plan_token(k.fence, now)
        redis.call('SET', k.fence, token)
        local grant = '=grant ' .. attempt .. ' ' .. token
        if lease then
          left = lease
          grant = grant .. ' ' .. math.max(math.floor((tonumber(now) - tonumber(since)) / 1000), 0)
        end
        if left_in_queue > 0 then
          redis.call('HSET', k.lock, next, attempt, '=token', token, QUEUED, '1')
        else
          redis.call('HSET', k.lock, next, attempt, '=token', token)
        end
        redis.call('PEXPIRE', k.lock, left)
        publish(k, grant)
        return
      end
    end
  end
  if queued > 0 or k.always then
    publish(k, message)
  end
end

-- Gives back the hold `id` of `owner` (whose holds are `list`), and the place `id` took in
-- the queue. `marked`: the lock's '=q' marker (the queue may have entries). Reads (and checks)
-- everything it needs before its first write. Returns the holds left ('' when the holding
-- ended), or false when `id` held nothing.
local function give_back(k, owner, list, id, message, marked)
  local queued = marked_length(k, marked)
  local held = list and has(list, id)
  if held then
    list = without(list, id)
    if list == '' and queued > 0 then
      check_counter(k.fence)
    end
  end
  if queued > 0 then
    leave_queue(k, owner, id)
  end
  if not held then
    return false
  end
  if list == '' then
    end_holding(k, queued, message)
  else
    redis.call('HSET', k.lock, owner, list)
  end
  return list
end

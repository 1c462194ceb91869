-- The wait queue, handover and giving holds back (after base.lua, holds.lua and tokens.lua).

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

-- The wait queue's length when the lock's marker `marked` says it may have entries, else 0.
local function marked_length(k, marked)
  if marked then
    return queue_length(k)
  end
  return 0
end

-- Parses a place field by field, from the left: 'attempt window_ms since_us client' (a
-- mutex's waiter), followed by ' value' for an election's participant, or by ':r', ':w' or
-- ':p' right after the client id (hex, so no value can end it) for a read-write lock's or a
-- semaphore's (family.lua). The value is the last field and data: any bytes, spaces,
-- newlines and ':r' too; nothing reads markers in it. Returns the attempt, the window, when
-- it was taken, the id of the client whose channel hears the handover, what the place is
-- for ('mutex', 'election', 'rw' or 'sem:', in the words of an acquire's refusal) and the
-- value (nil but for an election); nothing when the place is none of these.
local function parse_place(place)
  local attempt, window, since, client, rest =
    string.match(place or '', '^(%d+) (%d+) (%d+) (%x+)(.*)$')
  if not attempt then
    return nil
  end
  if rest == '' then
    return attempt, window, since, client, 'mutex'
  end
  if string.byte(rest) == 32 then
    return attempt, window, since, client, 'election', string.sub(rest, 2)
  end
  local side = string.match(rest, '^:([rwp])$')
  if side then
    return attempt, window, since, client, (side == 'p' and 'sem:') or 'rw'
  end
  return nil
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
-- (publishing '=grant <attempt> <token> <elapsed_ms>' to its client), or deletes it. The new
-- holder gets one window from now (never more than its lease: a fixed lease is its own
-- window): a waiter that died while queued costs the others at most that, while a live one
-- renews to its whole lease (its watchdog, a third into the window). `elapsed_ms` (the time
-- since its place was taken, rounded down) tells it how far its request lies behind the
-- handover, so that its own deadline (measured from sending that request, plus elapsed_ms,
-- plus the window) comes first. A release message (`message`) is published only when someone
-- may be waiting for it: a waiter of this server's queue (`queued` > 0, all places past their
-- windows), or any subscriber when the server keeps no queue for the lock (`k.always`:
-- RedLock).
-- `queued`: the queue's length; when it is not 0, `now` (the server's clock) and `token` (the
-- next fencing token, planned from `now`): all read, and the counter checked, before any change.
-- An election's change of leader (`k.elected`: the holding that ends advertised a value; or the
-- place handed the lock has one, which becomes the '=v' field) is published as '=leader' on the
-- release channel; a mutex's handover publishes nothing more.
local function end_holding(k, queued, message, now, token)
  redis.call('DEL', k.lock)
  local left_in_queue = queued
  while left_in_queue > 0 do
    local next = redis.call('LPOP', k.queue)
    if not next then
      break
    end
    left_in_queue = left_in_queue - 1
    local place = redis.call('HGET', k.waiting, next)
    redis.call('HDEL', k.waiting, next)
    local attempt, window, since, client, kind, value = parse_place(place)
    if kind == 'mutex' or kind == 'election' then
      local left = math.floor((tonumber(since) + tonumber(window) * 1000 - tonumber(now)) / 1000)
      if left >= 2 then
        redis.call('SET', k.fence, token, 'PX', k.horizon)
        local elapsed = math.max(math.floor((tonumber(now) - tonumber(since)) / 1000), 0)
        if value and left_in_queue > 0 then
          redis.call('HSET', k.lock, next, attempt, '=token', token, ELECTED, value, QUEUED, '1')
        elseif value then
          redis.call('HSET', k.lock, next, attempt, '=token', token, ELECTED, value)
        elseif left_in_queue > 0 then
          redis.call('HSET', k.lock, next, attempt, '=token', token, QUEUED, '1')
        else
          redis.call('HSET', k.lock, next, attempt, '=token', token)
        end
        redis.call('PEXPIRE', k.lock, window)
        -- To the new holder's client alone (it listens on the lock's channel followed by
        -- ':<client id>').
        local grant = '=grant ' .. attempt .. ' ' .. token .. ' ' .. elapsed
        publish(k.channel .. ':' .. client, k.sharded, grant)
        if value or k.elected then
          publish(k.channel, k.sharded, LEADER)
        end
        return
      end
    end
  end
  if queued > 0 or k.always then
    publish(k.channel, k.sharded, message)
  elseif k.elected then
    publish(k.channel, k.sharded, LEADER)
  end
end

-- Gives back the hold `id` of `owner` (whose holds are `list`), and the place `id` took in
-- the queue. `marked`: the lock's '=q' marker (the queue may have entries). Reads (and checks)
-- everything it needs before its first write. Returns the holds left ('' when the holding
-- ended), or false when `id` held nothing.
local function give_back(k, owner, list, id, message, marked)
  local queued = marked_length(k, marked)
  local held = list and has(list, id)
  local now, token
  if held then
    list = without(list, id)
    if list == '' and queued > 0 then
      now = now_us()
      token = plan_token(k.fence, now) -- for a handover
    end
  end
  if queued > 0 then
    leave_queue(k, owner, id)
  end
  if not held then
    return false
  end
  if list == '' then
    end_holding(k, queued, message, now, token)
  else
    redis.call('HSET', k.lock, owner, list)
  end
  return list
end

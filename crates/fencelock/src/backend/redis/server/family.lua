-- The lock family's layout and rule (after base.lua, tokens.lua and holds.lua): read-write
-- locks and semaphores in the lock's slot, beside the mutex's keys.
--
-- The lock hash `fencelock:{name}`:
--   '=k'           the kind: 'rw' (a read-write lock) or 'sem:N' (a semaphore of N permits).
--                  A mutex's or an election's hash has none; each side refuses the other.
--   <owner>        the owner's hold ids, as a mutex's holder (space-separated attempt ids).
--   '=h:<owner>'   the owner's holding: '<token> <since_us> <term_ms> [write hold ids...]',
--                  its fencing token, its own deadline on the server's clock (since + term:
--                  when it was granted or last renewed, and for how long; kept as the two
--                  numbers the scripts already have as text, which costs the common case no
--                  number formatting), and which of its holds are write holds (a reader's
--                  holding has none).
--   '=q'           while the wait queue has places.
-- The hash's TTL is the latest holding's deadline; each holding ends alone at its own
-- deadline: every family script drops the holdings past theirs before it applies the rule.
-- The wait queue is the mutex's (`:queue`, `:waiting`); a place ends with ':r', ':w' or ':p'
-- (its kind) after the client id: 'attempt window_ms since_us client:k'.
-- The rule, in arrival order: a reader holds when no writer holds and no place is ahead of
-- it; a writer when nothing holds and no place is ahead; a permit when fewer than N hold and
-- no place is ahead. A place is ahead only while its rule fails, so the queue's head is
-- always blocked: after a writer leaves, every reader at the head up to the next writer
-- holds at once, each told by its own '=grant'.

-- Sets the server's clock on `k`: `now_us` (text) and `now_ms` (a number).
local function family_now(k)
  k.now_us = now_us()
  k.now_ms = tonumber(string.sub(k.now_us, 1, #k.now_us - 3))
end

-- A family place: attempt, window_ms, since_us, client, kind letter (nil if not one).
local function family_place(text)
  return string.match(text or '', '^(%d+) (%d+) (%d+) (%x+):([rwp])$')
end

-- Reads the lock hash and the queue into a state table.
local function family_load(k)
  local st = {holders = {}, places = {}}
  local flat = read('HGETALL', k.lock)
  st.exists = #flat > 0
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if field == '=k' then
      st.kind = value
    elseif string.sub(field, 1, 3) == '=h:' then
      local owner = string.sub(field, 4)
      local h = st.holders[owner] or {}
      st.holders[owner] = h
      local token, since, term, writes = string.match(value, '^(%d+) (%d+) (%d+) ?(.*)$')
      h.token, h.since, h.term, h.writes = token, since, term, writes or ''
      if since then
        h.deadline = math.floor(tonumber(since) / 1000) + tonumber(term)
      end
    elseif field == '=v' then
      st.elected = true
    elseif string.sub(field, 1, 1) ~= '=' then
      local h = st.holders[field] or {}
      st.holders[field] = h
      h.ids = value
    end
  end
  if read('LLEN', k.queue) > 0 then
    local owners = redis.call('LRANGE', k.queue, 0, -1)
    for first = 1, #owners, 1000 do
      local last = math.min(first + 999, #owners)
      local stored = read('HMGET', k.waiting, unpack(owners, first, last))
      for i = first, last do
        local raw = stored[i - first + 1]
        local attempt, window, since, client, side = family_place(raw)
        st.places[#st.places + 1] = {owner = owners[i], raw = raw, attempt = attempt,
          window = tonumber(window), since = since, client = client, side = side}
      end
    end
  end
  return st
end

-- The refusal of asking `kind` (for `side`) of this state, or nil; a resize ('P') stores
-- its N. Replies {-1, what is there} or {-2, the stored N}.
local function family_check(st, kind, side)
  local sem = string.sub(kind, 1, 4) == 'sem:'
  if st.exists and not st.kind then
    return {-1, st.elected and 'election' or 'mutex'}
  end
  if st.kind and st.kind ~= kind then
    if (string.sub(st.kind, 1, 4) == 'sem:') ~= sem then
      return {-1, st.kind}
    end
    if side ~= 'P' then
      return {-2, tonumber(string.sub(st.kind, 5)) or 0}
    end
    st.dirty = true
  end
  for _, p in ipairs(st.places) do
    if p.raw and not p.side then
      return {-1, (string.find(p.raw, '^%d+ %d+ %d+ %x+ ') and 'election') or 'mutex'}
    end
    if p.side and (p.side == 'p') ~= sem then
      return {-1, (p.side == 'p' and 'sem:') or 'rw'}
    end
  end
  if st.kind ~= kind then
    st.kind, st.dirty = kind, true
  end
  return nil
end

-- Drops the holdings past their deadlines (and malformed ones): each ends alone.
local function family_purge(st, now_ms)
  for owner, h in pairs(st.holders) do
    if not h.ids or h.ids == '' or not h.deadline or h.deadline <= now_ms then
      st.holders[owner] = nil
      st.dirty = true
    end
  end
end

-- Whether an entry of kind `side` may hold now (no place being ahead of it).
local function family_may(st, side)
  if side == 'w' then
    return next(st.holders) == nil
  end
  local n = 0
  for _, h in pairs(st.holders) do
    if side == 'r' and h.writes ~= '' then
      return false
    end
    n = n + 1
  end
  return side == 'r' or n < (tonumber(string.sub(st.kind, 5)) or 0)
end

-- The next fencing token of this script (planned from the clock once, then one more each).
local function family_token(k)
  if k.last then
    k.last = succ(k.last)
  else
    k.last = plan_token(k.fence, k.now_us)
  end
  return k.last
end

-- A new holding of `owner` by hold `attempt`, for `term_ms`; returns its token.
local function family_grant(st, k, owner, attempt, side, term_ms)
  local token = family_token(k)
  st.holders[owner] = {ids = attempt, token = token, since = k.now_us, term = term_ms,
    deadline = k.now_ms + term_ms, writes = (side == 'w' and attempt) or ''}
  st.dirty = true
  return token
end

-- Hands the lock over by the rule, in queue order: dead places (past their windows) are
-- dropped, each place that may hold is granted (one '=grant' to its client) until one may
-- not. `caller` ({owner, attempt, side, lease}, or nil) is the attempt running the script:
-- at its own place (or at the end without one) it is granted without a message. Returns
-- the caller's token when it was granted, and whether the queue is blocked.
local function family_promote(st, k, caller)
  local kept, blocked, mine, placed = {}, false, nil, false
  for _, p in ipairs(st.places) do
    local own = caller and p.owner == caller.owner
    placed = placed or own
    if blocked then
      kept[#kept + 1] = p
    elseif own then
      if family_may(st, caller.side) then
        mine = family_grant(st, k, caller.owner, caller.attempt, caller.side, caller.lease)
        st.dirty = true
      else
        blocked = true
        kept[#kept + 1] = p
      end
    elseif not p.side
        or tonumber(p.since) + p.window * 1000 - tonumber(k.now_us) < 2000 then
      st.dirty = true -- past its window (or unreadable): the waiter died
    elseif family_may(st, p.side) then
      local token = family_grant(st, k, p.owner, p.attempt, p.side, p.window)
      local elapsed = math.max(math.floor((tonumber(k.now_us) - tonumber(p.since)) / 1000), 0)
      publish(k.channel .. ':' .. p.client, k.sharded,
        '=grant ' .. p.attempt .. ' ' .. token .. ' ' .. elapsed)
    else
      blocked = true
      kept[#kept + 1] = p
    end
  end
  st.places = kept
  if caller and not placed and not blocked and family_may(st, caller.side) then
    mine = family_grant(st, k, caller.owner, caller.attempt, caller.side, caller.lease)
  end
  return mine, blocked
end

-- Gives back hold `id` of `owner` and the place attempt `id` took. Returns whether it was
-- a hold, and the owner's holds left.
local function family_drop(st, owner, id)
  for i, p in ipairs(st.places) do
    if p.owner == owner and p.attempt == id then
      table.remove(st.places, i)
      st.dirty = true
      break
    end
  end
  local h = st.holders[owner]
  if not (h and has(h.ids, id)) then
    return false, 0
  end
  h.ids = without(h.ids, id)
  if has(h.writes, id) then
    h.writes = without(h.writes, id)
  end
  st.dirty = true
  if h.ids == '' then
    st.holders[owner] = nil
    return true, 0
  end
  return true, count(h.ids)
end

-- HSET/RPUSH of many arguments, in slices (unpack() of a long list would overflow Lua's
-- stack).
local function family_push(command, key, args)
  for first = 1, #args, 1000 do
    redis.call(command, key, unpack(args, first, math.min(first + 999, #args)))
  end
end

-- Writes the state back when it changed: the hash (TTL: the latest deadline) and the queue
-- (TTL: the latest place's window), or deletes them when empty.
local function family_save(st, k)
  if not st.dirty then
    return
  end
  redis.call('DEL', k.lock, k.queue, k.waiting)
  local fields, longest = {'=k', st.kind}, 0
  for owner, h in pairs(st.holders) do
    local holding = h.token .. ' ' .. h.since .. ' ' .. h.term
    if h.writes ~= '' then
      holding = holding .. ' ' .. h.writes
    end
    fields[#fields + 1], fields[#fields + 2] = owner, h.ids
    fields[#fields + 1], fields[#fields + 2] = '=h:' .. owner, holding
    longest = math.max(longest, h.deadline - k.now_ms)
  end
  if #fields == 2 then
    st.places = {} -- nobody holds: nobody can be blocked
  end
  if #st.places > 0 then
    fields[#fields + 1], fields[#fields + 2] = QUEUED, '1'
    local owners, places, window = {}, {}, 0
    for _, p in ipairs(st.places) do
      owners[#owners + 1] = p.owner
      places[#places + 1], places[#places + 2] = p.owner, p.raw
      local left = (tonumber(p.since) + p.window * 1000 - tonumber(k.now_us)) / 1000
      window = math.max(window, math.ceil(left))
    end
    family_push('RPUSH', k.queue, owners)
    family_push('HSET', k.waiting, places)
    redis.call('PEXPIRE', k.queue, math.max(window, 1))
    redis.call('PEXPIRE', k.waiting, math.max(window, 1))
  end
  if #fields > 2 then
    family_push('HSET', k.lock, fields)
    redis.call('PEXPIRE', k.lock, math.max(longest, 1))
  end
  if k.last then
    redis.call('SET', k.fence, k.last, 'PX', k.horizon)
  end
end

-- The time until the first holding's deadline, in ms (at least 1).
local function family_remaining(st, now_ms)
  local soonest = nil
  for _, h in pairs(st.holders) do
    if not soonest or h.deadline < soonest then
      soonest = h.deadline
    end
  end
  return math.max((soonest or now_ms) - now_ms, 1)
end

-- Gives back hold `id` of `owner` ('': its newest hold; an owner holding nothing leaves the
-- queue) of a family lock, and hands over by the rule. Returns the holds left, or -1.
local function family_release(k, owner, id)
  local st = family_load(k)
  if not st.kind then
    st.kind = 'rw'
  end
  family_now(k)
  check_counter(k.fence) -- a handover issues tokens: fail before any change if it cannot
  family_purge(st, k.now_ms)
  local held, left
  if id == '' and not st.holders[owner] then
    for i, p in ipairs(st.places) do
      if p.owner == owner then
        table.remove(st.places, i)
        st.dirty = true
        break
      end
    end
    held, left = false, 0
  else
    if id == '' then
      id = string.match(st.holders[owner].ids, '(%S+)$')
    end
    held, left = family_drop(st, owner, id)
  end
  family_promote(st, k, nil)
  family_save(st, k)
  if not held then
    return -1
  end
  return left
end

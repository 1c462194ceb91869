-- Acquire a read-write lock's side or a semaphore's permit (after family_free.lua, which took
-- it in the common case and defined `side` and `kind`, base.lua, tokens.lua, holds.lua and
-- family.lua, whose layout and rule it applies).
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter, KEYS[3]: the wait queue,
-- KEYS[4]: the waiting owners (as acquire.lua)
-- ARGV[1]: owner id, ARGV[2]: lease in ms, ARGV[3]: attempt id (this hold's id),
-- ARGV[4]: the counter's horizon in ms, ARGV[5]: what is asked: 'r' (read), 'w' (write),
--          'p<N>' (a permit of N), 'P<N>' (a permit, storing N as the semaphore's number),
-- ARGV[6]: '' not to queue, or a place window in ms (as acquire.lua),
-- ARGV[7]: the attempt id of the caller's place so far, or '' (as acquire.lua),
-- ARGV[8]: the release channel, ARGV[9]: 'S' to publish with SPUBLISH,
-- ARGV[10]: the caller's client id, ARGV[11...]: attempts of this owner given up (their holds
--          and places go first).
-- An attempt that neither queues, claims nor gives anything back sends ARGV[1..5] and the
-- publish mode ('S' or '') as ARGV[6] alone: every argument costs the server, and the
-- channel is the lock's key followed by ':released'.
-- Returns {1, hold count, token} when held, {0, ms until the first holding's deadline} when
-- not (the caller tries again then, or when handed the lock), {-1, what the name is used as}
-- ('mutex', 'election', 'rw', 'sem:N'), {-2, N stored} for another N without resize, {-3} for
-- a read -> write upgrade. A refusal changes nothing.
local short = #ARGV == 6
local k = {lock = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiting = KEYS[4],
  channel = ARGV[8], sharded = ARGV[9] == 'S', horizon = ARGV[4]}
local owner, attempt, lease = ARGV[1], ARGV[3], tonumber(ARGV[2])
local window, claim = tonumber(ARGV[6]), ARGV[7]
if short then
  k.channel, k.sharded, window, claim = KEYS[1] .. ':released', ARGV[6] == 'S', nil, ''
end
local st = family_load(k)
local refused = family_check(st, kind, side)
if refused then
  return refused
end
family_now(k)
check_counter(k.fence)
family_purge(st, k.now_ms)
for i = 11, #ARGV do
  family_drop(st, owner, ARGV[i])
end
if side == 'P' then
  side = 'p'
end
local mine = st.holders[owner]
if mine and has(mine.ids, attempt) then
  family_save(st, k)
  return {1, count(mine.ids), mine.token}
end
if mine then
  if claim ~= '' and has(mine.ids, claim) then
    -- the handover this caller missed becomes this attempt's hold: no second hold
    mine.ids = string.gsub(' ' .. mine.ids .. ' ', ' ' .. claim .. ' ', ' ' .. attempt .. ' ')
    mine.ids = string.match(mine.ids, '^%s*(.-)%s*$')
    if has(mine.writes, claim) then
      mine.writes = string.match(without(mine.writes, claim) .. ' ' .. attempt, '^%s*(.-)$')
    end
  elseif side == 'w' and mine.writes == '' then
    return {-3}
  else
    -- re-entry, or a writer's downgrade: a hold of its own in the same holding
    mine.ids = mine.ids .. ' ' .. attempt
    if side == 'w' then
      mine.writes = (mine.writes == '' and attempt) or (mine.writes .. ' ' .. attempt)
    end
  end
  if k.now_ms + lease > mine.deadline then -- never shortened
    mine.since, mine.term, mine.deadline = k.now_us, ARGV[2], k.now_ms + lease
  end
  st.dirty = true
  for i, p in ipairs(st.places) do
    if p.owner == owner then
      table.remove(st.places, i)
      break
    end
  end
  family_promote(st, k, nil)
  family_save(st, k)
  return {1, count(mine.ids), mine.token}
end
local caller = {owner = owner, attempt = attempt, side = side, lease = lease}
local token = family_promote(st, k, caller)
if token then
  family_save(st, k)
  return {1, 1, token}
end
if window then
  local place = attempt .. ' ' .. ARGV[6] .. ' ' .. k.now_us .. ' ' .. ARGV[10] .. ':' .. side
  local entry = {owner = owner, raw = place, attempt = attempt, window = window,
    since = k.now_us, client = ARGV[10], side = side}
  local found = false
  for i, p in ipairs(st.places) do
    if p.owner == owner then
      st.places[i], found = entry, true
    end
  end
  if not found then
    st.places[#st.places + 1] = entry
  end
  st.dirty = true
end
family_save(st, k)
return {0, family_remaining(st, k.now_ms)}

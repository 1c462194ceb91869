-- The acquire script's common case, its first part (before any function is defined: a
-- definition costs the server at every call, see base.lua): a free lock with nobody queued,
-- taken by an attempt that neither queues nor gives anything back (at most ARGV[5]; see
-- acquire.lua for the arguments). One EXISTS tells both: neither the lock nor its wait queue
-- is there. A free lock whose queue still has places (its holder's lease ran out while
-- others waited) goes on to acquire.lua, which marks the lock, so that its release hands it
-- to the first place.
--
-- The token is `max(last + 1, floor)` (tokens.lua), where the floor is the server's clock in
-- µs or RedLock's proposal. In the common case the floor is above the counter: one
-- `SET ... GET` writes it and returns the last token, which shows that it was. This is the
-- one write before a check ("check everything before any write", base.lua, is relaxed here):
-- when the counter was not below the floor (ahead of the clock, not a number), the old value
-- is put back at once, and acquire.lua works the token out from it. Either way the counter
-- never holds less than it did, and nothing else has changed: a script that fails afterwards
-- leaves only the counter's TTL renewed. A counter of the wrong type is not written (SET
-- ... GET refuses it) and acquire.lua names it.
--
-- An election's participant that neither queues, claims nor gives anything back (ARGV[6] and
-- ARGV[7] empty, ARGV[11] its value and the last argument: see acquire.lua) takes a free lock
-- here too: its value goes in the '=v' field, and observers hear '=leader' on the lock's
-- channel.
local elects = #ARGV == 11 and ARGV[6] == '' and ARGV[7] == '' and string.byte(ARGV[11]) == 61
if (#ARGV < 6 or elects) and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local floor = ARGV[5]
  if not floor or floor == '' then
    local now = redis.call('TIME')
    floor = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  end
  local last = redis.pcall('SET', KEYS[2], floor, 'PX', ARGV[4], 'GET')
  if not last or (type(last) == 'string' and not string.find(last, '%D')
      and (#last < #floor or (#last == #floor and last < floor))) then
    if elects then
      local value = string.sub(ARGV[11], 2)
      redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], '=token', floor, '=v', value)
      redis.call(ARGV[9] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[8], '=leader')
    else
      redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], '=token', floor)
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 1, floor}
  end
  if type(last) == 'string' then
    redis.call('SET', KEYS[2], last, 'PX', ARGV[4])
  end
end
local pttl = redis.call('PTTL', KEYS[1])

-- The family acquire script's common case, its first part (before any function is defined:
-- see base.lua): a read-write lock's side or a semaphore's permit taken on a name with no
-- lock hash and no wait queue (one EXISTS tells both), by an attempt that neither queues,
-- claims nor gives anything back (the short call: ARGV[6] is the publish mode, see
-- family_acquire.lua). It writes the kind ('=k'), the owner's hold and its
-- holding ('=h:<owner>': token, since, term, write holds) in one HSET, as family.lua describes.
-- The counter is written as acquire_free.lua writes it (one SET ... GET, put back at once
-- when it was not below the clock), and the holding runs from that clock for the lease. See family_acquire.lua for the arguments.
local shape = ARGV[5]
local side = string.sub(shape, 1, 1)
local kind = 'rw'
if side == 'p' or side == 'P' then
  kind = 'sem:' .. string.sub(shape, 2)
end
if #ARGV == 6 and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local now = redis.call('TIME')
  local floor = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local last = redis.pcall('SET', KEYS[2], floor, 'PX', ARGV[4], 'GET')
  if not last or (type(last) == 'string' and not string.find(last, '%D')
      and (#last < #floor or (#last == #floor and last < floor))) then
    local holding = floor .. ' ' .. floor .. ' ' .. ARGV[2]
    if side == 'w' then
      holding = holding .. ' ' .. ARGV[3]
    end
    redis.call('HSET', KEYS[1], '=k', kind, ARGV[1], ARGV[3], '=h:' .. ARGV[1], holding)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 1, floor}
  end
  if type(last) == 'string' then
    redis.call('SET', KEYS[2], last, 'PX', ARGV[4])
  end
end

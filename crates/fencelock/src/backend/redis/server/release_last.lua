-- The release script's common case, its first part (before any function is defined, see
-- base.lua): the owner's only hold given back, with nobody queued (no '=q' marker), so the
-- lock is deleted and handed to nobody (see release.lua for the arguments). It reads
-- `fields` (the owner's holds, the marker, and an election leader's value), which release.lua
-- goes on with otherwise; a lock of the wrong type fails there, named. An election's leader
-- that resigns is announced to observers ('=leader'). A read-write lock's or a semaphore's
-- hold ('=k' set) is given back by family.lua's rule in release.lua, but in its own common
-- case here.
local fields = redis.pcall('HMGET', KEYS[1], ARGV[1], '=q', '=v', '=k')
-- A read-write lock's or a semaphore's lone holding ('=k', the owner and its '=h:' field:
-- family.lua) given back with nobody queued.
if fields[4] and ARGV[3] ~= '' and fields[1] == ARGV[3] and not fields[2]
    and redis.call('HLEN', KEYS[1]) == 3 then
  redis.call('DEL', KEYS[1])
  return 0
end
if ARGV[3] ~= '' and fields[1] == ARGV[3] and not fields[2] and not fields[4] then
  redis.call('DEL', KEYS[1])
  if ARGV[5] and ARGV[5] ~= '' then -- RedLock: every release is announced
    redis.call(ARGV[6] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[2], ARGV[5])
  elseif fields[3] then
    redis.call(ARGV[6] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[2], '=leader')
  end
  return 0
end

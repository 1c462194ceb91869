-- The release script's common case (after base.lua, before the other parts are defined, see
-- base.lua): the owner's only hold given back, with nobody queued (no '=q' marker), so the
-- lock is deleted and handed to nobody (see release.lua for the arguments). It reads
-- `fields` (the owner's holds and the marker), which release.lua goes on with otherwise.
local fields = read('HMGET', KEYS[1], ARGV[1], QUEUED)
if ARGV[3] ~= '' and fields[1] == ARGV[3] and not fields[2] then
  redis.call('DEL', KEYS[1])
  if ARGV[5] and ARGV[5] ~= '' then
    publish(ARGV[2], ARGV[6] == 'S', ARGV[5]) -- RedLock: every release is announced
  end
  return 0
end

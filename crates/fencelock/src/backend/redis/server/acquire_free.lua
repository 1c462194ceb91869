-- The acquire script's common case (after base.lua and tokens.lua, before the other parts
-- are defined, see base.lua): a free lock with nobody queued, taken by an attempt that
-- neither queues nor gives anything back (at most ARGV[5]; see acquire.lua for the
-- arguments). One EXISTS tells both: neither the lock nor its wait queue is there. A free
-- lock whose queue still has places (its holder's lease ran out while others waited) goes on
-- to acquire.lua, which marks the lock, so that its release hands it to the first place.
-- Otherwise it reads `pttl`, which acquire.lua goes on with.
if #ARGV < 6 and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local proposal = ARGV[5] or ''
  local token = plan_token(KEYS[2], (proposal ~= '' and proposal) or now_us())
  redis.call('SET', KEYS[2], token, 'PX', ARGV[4])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], '=token', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 1, token}
end
local pttl = redis.call('PTTL', KEYS[1])

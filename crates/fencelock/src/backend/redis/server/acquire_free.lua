-- The acquire script's common case (after base.lua and tokens.lua, before the other parts
-- are defined, see base.lua): a free lock, taken by an attempt that neither queues nor gives
-- anything back (no queue keys, no ARGV[10...]; see acquire.lua for the arguments). It reads
-- `pttl`, which acquire.lua goes on with in every other case.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and not KEYS[3] and #ARGV < 10 then
  local proposal = ARGV[4] or ''
  local token = plan_token(KEYS[2], (proposal ~= '' and proposal) or now_us())
  redis.call('SET', KEYS[2], token)
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], '=token', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 1, token}
end

-- The fenced register of a semaphore of N (verify --primitive semaphore): N fenced slots.
-- A permit holding takes a slot when it is granted ('enter'), writes only while it has one
-- ('write'), and gives it back before it gives back its permit ('leave'). A write is valid
-- iff its holding still has its slot.
--
-- The slots are the tokens of the holdings the register knows to be live (a sorted set,
-- scored by token). When a holding enters and all N slots are taken, the semaphore has
-- granted more permits than the register has room for: at least one holding in the slots
-- (or the one entering) has ended without leaving, which only a holding whose lease ran
-- out does (paused, cut off or killed past its lease). The register then takes the slots of
-- the lowest tokens until N are left: a holding whose permit was given to another outlived
-- its lease, so it was granted before every holding still valid (Redis: tokens are grant
-- times; ZooKeeper and etcd: a holding with a lower entry holds whenever a higher one does),
-- as long as valid holdings are shorter than the lease (a verify hold is at most a quarter
-- of it). A holding that loses its slot, or never got one, is refused from then on.
--
-- The value and the latest token go in the fields 'value' and 'token', as fencelock's
-- FencedRegister keeps them, so that it reads them.
-- KEYS[1]: the register, KEYS[2]: its slots (sorted set of tokens).
-- ARGV[1]: 'enter', 'write' or 'leave'; ARGV[2]: the holding's token (decimal);
-- enter: ARGV[3] = N; returns 1 when the holding has a slot, else 0.
-- write: ARGV[3] = the value, ARGV[4] = '1' fenced, '0' the negative control (written
--   anyway, the reply saying it would have been refused); returns {accepted, stale}.
-- leave: returns 1 when the holding had a slot.
-- Tokens are scores (doubles): exact below 2^53 (see unfenced.lua).
local limit = 9007199254740992
local op = ARGV[1]
local token = tonumber(ARGV[2])
if token == nil or token >= limit then
  return redis.error_reply('token above 2^53: cannot compare exactly')
end
local function has_slot()
  return redis.call('ZSCORE', KEYS[2], ARGV[2]) ~= false
end
if op == 'enter' then
  local n = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], token, ARGV[2])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(n + 1))
  if has_slot() then
    return 1
  end
  return 0
elseif op == 'write' then
  local stale = 0
  if not has_slot() then
    stale = 1
    if ARGV[4] == '1' then
      return {0, 1}
    end
  end
  redis.call('HSET', KEYS[1], 'value', ARGV[3], 'token', ARGV[2])
  return {1, stale}
elseif op == 'leave' then
  return redis.call('ZREM', KEYS[2], ARGV[2])
end
return redis.error_reply('unknown operation ' .. tostring(op))

-- Fencing tokens (after base.lua).

-- Fencing tokens are decimal text compared exactly: Lua numbers are doubles, exact only
-- below 2^53, and a counter written by another tool may be anywhere up to 2^64 - 1.
local MAX_TOKEN = '18446744073709551615'

local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local function succ(a)
  local i = #a
  while i >= 1 and string.byte(a, i) == 57 do -- '9'
    i = i - 1
  end
  -- The digits after i were all '9': they become '0'.
  local zeros = string.rep('0', #a - i)
  if i == 0 then
    return '1' .. zeros
  end
  return string.sub(a, 1, i - 1) .. string.char(string.byte(a, i) + 1) .. zeros
end

-- The server's clock in microseconds, as decimal text (no number conversions: TIME answers
-- text, and the microseconds are padded to six digits).
local function now_us()
  local now = redis.call('TIME')
  return now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
end

-- The next token, max(last + 1, floor), where `floor` is a clock in us or a token proposed
-- by the client (RedLock): a counter lost in a restart without persistence, or stale on a
-- promoted replica, cannot make tokens go backwards. Only reads: the caller stores it with
-- SET once every check has passed. Fails, changing nothing, when the counter is not a
-- number or the tokens are used up.
local function plan_token(counter, floor)
  local last = read('GET', counter) or '0'
  if not string.match(last, '^%d+$') then
    error({err = 'FENCE ' .. counter .. ' does not hold a fencing counter'})
  end
  -- The common case: the clock is ahead of the counter, so last + 1 <= floor. (`floor` has
  -- no leading zeros and is at most 2^64 - 1; `less` is exact for digits even when `last`
  -- has leading zeros, which only make it longer than its value.)
  if less(last, floor) then
    return floor
  end
  if string.byte(last, 1) == 48 and #last > 1 then -- leading zeros (written by hand)
    last = string.gsub(last, '^0+(%d)', '%1')
  end
  if less(MAX_TOKEN, last) or last == MAX_TOKEN then
    error({err = 'FENCE ' .. counter .. ' has issued the highest fencing token (2^64 - 1)'})
  end
  local token = succ(last)
  if less(token, floor) then
    token = floor
  end
  return token
end

-- Fails, changing nothing, unless the counter can issue another token (read before an
-- acquire gives back abandoned attempts, which may hand the lock over, or a RedLock write-back).
local function check_counter(counter)
  plan_token(counter, '0')
end

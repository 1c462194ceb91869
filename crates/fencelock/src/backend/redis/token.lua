-- Prepended to acquire.lua and release.lua: the fencing-token rule both use.
-- The next token is max(last + 1, a clock in us): a counter lost in a restart without
-- persistence, or stale on a promoted replica, cannot make tokens go backwards. Stores it in
-- the counter key and returns it as text ('%.0f', because Lua's tostring would print 16-digit
-- numbers in exponent form).
local function next_token(counter, clock)
  local token = (tonumber(redis.call('GET', counter) or '0') or 0) + 1
  if token < clock then
    token = clock
  end
  local text = string.format('%.0f', token)
  redis.call('SET', counter, text)
  return text
end

-- The server's clock in microseconds.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end


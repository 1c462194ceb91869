-- A reader's checked read (verify --primitive rwlock): the register's value, and whether a
-- write with a higher token than the reader's was taken, i.e. a writer that came after the
-- reader wrote while the reader thought it held: its view no longer stands.
-- KEYS[1]: the register (the fields 'value' and 'token' of fencelock's FencedRegister).
-- ARGV[1]: the reader's token (decimal).
-- Returns {stale (0 or 1), value ('' before the first write)}.
-- Tokens are compared as Lua numbers, exact below 2^53 (see unfenced.lua).
local limit = 9007199254740992
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token >= limit or highest >= limit then
  return redis.error_reply('token above 2^53: cannot compare exactly')
end
local value = redis.call('HGET', KEYS[1], 'value') or ''
if highest > token then
  return {1, value}
end
return {0, value}

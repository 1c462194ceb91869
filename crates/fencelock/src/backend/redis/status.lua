-- A consistent snapshot of one lock.
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter
-- Returns {remaining lease in ms (-2: not held), last token issued or false, field, value, ...}
local fields = redis.call('HGETALL', KEYS[1])
local reply = {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
for i = 1, #fields do
  reply[#reply + 1] = fields[i]
end
return reply

-- A consistent snapshot of one lock and its wait queue (after base.lua: a key of the wrong
-- type fails the script with an error that names it).
-- KEYS[1]: the lock hash, KEYS[2]: the fencing counter,
-- KEYS[3]: the wait queue (owners in arrival order), KEYS[4]: the waiting owners
--          (owner -> 'attempt window_ms since_us client'; see acquire.lua)
-- Returns {remaining lease in ms (-2: not held), last token issued or false,
--          {field, value, ...} of the lock hash,
--          the server's clock {seconds, microseconds} (TIME, which the places count from),
--          {owner, place or false, ...} in queue order}.
-- Missing queue keys give an empty queue; an owner the queue names without a place gives
-- false for its place. The places are returned as stored: the client reads them.
local queue = read('LRANGE', KEYS[3], 0, -1)
local places = {}
-- HMGET in slices: unpack() of a long queue would overflow Lua's stack.
for first = 1, #queue, 1000 do
  local last = math.min(first + 999, #queue)
  local stored = read('HMGET', KEYS[4], unpack(queue, first, last))
  for i = first, last do
    places[2 * i - 1] = queue[i]
    places[2 * i] = stored[i - first + 1]
  end
end
return {
  redis.call('PTTL', KEYS[1]),
  read('GET', KEYS[2]),
  read('HGETALL', KEYS[1]),
  redis.call('TIME'),
  places,
}

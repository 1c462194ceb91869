-- Holds (after base.lua): a list of attempt ids.
local function has(list, id)
  return string.find(' ' .. list .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

local function count(list)
  local n = 0
  for _ in string.gmatch(list, '%S+') do
    n = n + 1
  end
  return n
end

-- The list without `id` (without its newest hold when `id` is nil).
local function without(list, id)
  local kept, dropped = {}, false
  local ids = {}
  for each in string.gmatch(list, '%S+') do
    ids[#ids + 1] = each
  end
  for i = #ids, 1, -1 do
    if not dropped and (id == nil or ids[i] == id) then
      dropped = true
    else
      table.insert(kept, 1, ids[i])
    end
  end
  return table.concat(kept, ' ')
end

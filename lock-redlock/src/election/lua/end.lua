-- Ends the term of ARGV[1] before its leader key is released: its info
-- KEYS[2] goes, and on a resignation (ARGV[2] = '1') its lock-delay marker
-- KEYS[3] too (else it runs out); the end is announced on KEYS[4]. 1 if
-- the info was the term's.
local mine = ARGV[1] .. ' '
local function ours(k)
  local v = redis.call('GET', k)
  return v and string.sub(v, 1, #mine) == mine
end
if ARGV[2] == '1' and ours(KEYS[3]) then redis.call('DEL', KEYS[3]) end
if not ours(KEYS[2]) then return 0 end
redis.call('DEL', KEYS[2])
local t = redis.call('TIME')
redis.pcall('PUBLISH', KEYS[4], 'none ' .. string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2])))
return 1

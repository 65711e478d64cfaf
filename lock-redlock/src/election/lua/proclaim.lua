-- The leader ARGV[1] (holding KEYS[1], its info in KEYS[2]) publishes the
-- value ARGV[3] as its proclaim number ARGV[2]: stored unless a proclaim
-- with that number or a later one is there already (a late or repeated
-- copy changes nothing), and announced on KEYS[3]. 1: the value of that
-- proclaim (or of a later one) is stored; 0: the term is not ours here.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local mine = ARGV[1] .. ' '
local info = redis.call('GET', KEYS[2])
if not info or string.sub(info, 1, #mine) ~= mine then return 0 end
local seq, since = string.match(string.sub(info, #mine + 1), '^(%d+) (%d+) ')
if not seq then return 0 end
if tonumber(seq) >= tonumber(ARGV[2]) then return 1 end
local pttl = redis.call('PTTL', KEYS[1])
local stored = mine .. ARGV[2] .. ' ' .. since .. ' ' .. ARGV[3]
if pttl > 0 then
  redis.call('SET', KEYS[2], stored, 'PX', pttl)
else
  redis.call('SET', KEYS[2], stored)
end
local t = redis.call('TIME')
local v = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.pcall('PUBLISH', KEYS[3], 'leader ' .. v .. ' ' .. ARGV[2] .. ' ' .. since .. ' ' .. pttl .. ' ' .. ARGV[3])
return 1

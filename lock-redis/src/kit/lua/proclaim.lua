if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local info = redis.call('GET', KEYS[2])
if not info or string.sub(info, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return 0 end
local epoch, since = string.match(string.sub(info, #ARGV[1] + 2), '^(%d+) (%d+) ')
if not epoch then return 0 end
local stored = ARGV[1] .. ' ' .. epoch .. ' ' .. since .. ' ' .. ARGV[2]
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[2], stored, 'PX', pttl)
else
  redis.call('SET', KEYS[2], stored)
end
local t = redis.call('TIME')
local v = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.pcall('PUBLISH', KEYS[3], 'leader ' .. v .. ' ' .. epoch .. ' ' .. since .. ' ' .. pttl .. ' ' .. ARGV[2])
return 1

local t = redis.call('TIME')
local v = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local owner = redis.call('GET', KEYS[1])
if not owner then return {v} end
local info = redis.call('GET', KEYS[2])
if not info or string.sub(info, 1, #owner + 1) ~= owner .. ' ' then return {v} end
local epoch, since, value = string.match(string.sub(info, #owner + 2), '^(%d+) (%d+) (.*)$')
if not epoch then return {v} end
return {v, epoch, since, tostring(redis.call('PTTL', KEYS[1])), value}

local fence = (tonumber(redis.call('GET', KEYS[3])) or 0) + 1
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if us > fence then fence = us end
redis.call('SET', KEYS[3], string.format('%.0f', fence))

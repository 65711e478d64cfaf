local fence = (tonumber(redis.call('GET', @counter@)) or 0) + 1
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if us > fence then fence = us end
redis.call('SET', @counter@, string.format('%.0f', fence))

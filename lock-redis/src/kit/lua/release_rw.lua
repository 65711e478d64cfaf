
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
if tonumber(string.sub(v, 3)) <= now then return 0 end
return 1


local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
if tonumber(exp) <= now then return 0 end
return 1

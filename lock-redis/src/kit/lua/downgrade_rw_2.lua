local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], 'r ' .. string.format('%.0f', now + ttl))
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
return {1, fence}

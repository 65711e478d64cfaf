
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.pcall('PUBLISH', KEYS[3], ARGV[1])
  return 1
end
return 0

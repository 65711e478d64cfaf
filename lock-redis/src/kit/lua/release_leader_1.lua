if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then return 0 end
local t = redis.call('TIME')

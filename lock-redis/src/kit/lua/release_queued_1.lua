
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
end
local holder = redis.call('GET', KEYS[1])
if not holder or (ARGV[3] ~= '1' and holder ~= ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[6])
  redis.pcall('PUBLISH', KEYS[5], holder)
  return 1
end
local t = redis.call('TIME')

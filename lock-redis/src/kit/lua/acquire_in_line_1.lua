
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
local holder = redis.call('GET', KEYS[1])
local function leave()
  if ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[2], ARGV[3])
    redis.call('ZREM', KEYS[3], ARGV[3])
    if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('DEL', KEYS[4]) end
  end
end
if holder == ARGV[1] then
  leave()
  return {1}
end

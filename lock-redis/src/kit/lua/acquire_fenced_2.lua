  return fence
end
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fenced()}
end
local me = ARGV[1] .. ' ' .. ARGV[2]
if ARGV[5] ~= '' then me = me .. ' ' .. ARGV[5] end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
  return {1, fenced()}
end
t = redis.call('TIME')

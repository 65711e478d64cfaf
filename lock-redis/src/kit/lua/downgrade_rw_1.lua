
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'w' or tonumber(string.sub(v, 3)) <= now then
  return {0, 0}
end

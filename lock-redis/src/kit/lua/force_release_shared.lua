
local rw = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.sub(all[i + 1], 3))
  redis.call('HDEL', KEYS[1], all[i])
  if exp and exp > now then
    rw = rw + 1
    redis.pcall('PUBLISH', KEYS[2], all[i])
  end
end
local permits = 0
local held = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  redis.call('ZREM', KEYS[3], held[i])
  if tonumber(held[i + 1]) > now then
    permits = permits + 1
    redis.pcall('PUBLISH', KEYS[4], held[i])
  end
end
return {rw, permits}

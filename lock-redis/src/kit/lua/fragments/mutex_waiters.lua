local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function next_waiter()
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
  end
  while true do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if first == nil then return nil end
    if string.match(first, '^%x+ %d+$') or string.match(first, '^%x+ %d+ {') then return first end
    redis.call('ZREM', KEYS[3], first)
    redis.call('ZREM', KEYS[4], first)
  end
end

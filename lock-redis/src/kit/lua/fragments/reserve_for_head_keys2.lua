head = nil
local lapse
while true do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not first then break end
  lapse = tonumber(redis.call('ZSCORE', KEYS[3], first))
  if lapse and lapse > now then head = first break end
  redis.call('ZREM', KEYS[2], first)
  redis.call('ZREM', KEYS[3], first)
end
if head then
  local hold = lapse - now
  local ttl, grace = string.match(head, '%+(%d+)%+(%d+)$')
  if ttl and hold > tonumber(grace) then
    hold = tonumber(ttl)
    redis.call('ZADD', KEYS[3], now + hold, head)
  end
  redis.call('SET', KEYS[1], 'line:' .. head, 'PX', math.max(hold, 1))
  turn_seq = math.max((tonumber(redis.call('GET', KEYS[4])) or 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1)
  redis.call('SET', KEYS[4], string.format('%.0f', turn_seq), 'PX', math.max(hold, redis.call('PTTL', KEYS[2]), 1))
else
  redis.call('DEL', KEYS[1], KEYS[4])
end

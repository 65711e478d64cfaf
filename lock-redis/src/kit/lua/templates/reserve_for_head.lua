head = nil
local lapse
while true do
  local first = redis.call('ZRANGE', @line@, 0, 0)[1]
  if not first then break end
  lapse = tonumber(redis.call('ZSCORE', @lapse@, first))
  if lapse and lapse > now then head = first break end
  redis.call('ZREM', @line@, first)
  redis.call('ZREM', @lapse@, first)
end
if head then
  local hold = lapse - now
  local ttl, grace = string.match(head, '%+(%d+)%+(%d+)$')
  if ttl and hold > tonumber(grace) then
    hold = tonumber(ttl)
    redis.call('ZADD', @lapse@, now + hold, head)
  end
  redis.call('SET', @key@, 'line:' .. head, 'PX', math.max(hold, 1))
  turn_seq = math.max((tonumber(redis.call('GET', @seq@)) or 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1)
  redis.call('SET', @seq@, string.format('%.0f', turn_seq), 'PX', math.max(hold, redis.call('PTTL', @line@), 1))
else
  redis.call('DEL', @key@, @seq@)
end

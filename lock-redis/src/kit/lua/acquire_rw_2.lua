  local ttl = tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ' ' .. string.format('%.0f', now + ttl))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  return {1, fence}
end
for _, m in ipairs(ahead) do
  local lapse = tonumber(redis.call('ZSCORE', KEYS[4], m))
  if lapse and lapse - now > longest then longest = lapse - now end
end
if me ~= '' then
  local lasts = tonumber(ARGV[5])
  if not arrival then
    -- Arrivals are strictly ordered: one in the same millisecond as the
    -- last comes a hundredth of a millisecond after it, so that no waiter
    -- counts one that arrived before it as level with it.
    local at = now
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) >= at then at = tonumber(last[2]) + 0.01 end
    redis.call('ZADD', KEYS[2], 'NX', at, me)
  end
  redis.call('ZADD', KEYS[4], now + lasts, me)
  for _, k in ipairs({KEYS[2], KEYS[4]}) do
    if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
  end
end
return {0, longest}

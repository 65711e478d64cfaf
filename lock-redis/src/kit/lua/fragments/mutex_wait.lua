if ARGV[3] == '1' then
  local lasts = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[3], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), me)
  redis.call('ZADD', KEYS[4], now + lasts, me)
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
  end
end
local last = math.max(tonumber(redis.call('GET', KEYS[2])) or 0, tonumber(t[1]) * 1000000 + tonumber(t[2]))

local lasts = tonumber(ARGV[5])
redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[3])
redis.call('ZADD', KEYS[3], now + lasts, ARGV[3])
for _, k in ipairs({KEYS[2], KEYS[3]}) do
  if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
end

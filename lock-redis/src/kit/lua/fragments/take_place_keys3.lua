local lasts = tonumber(ARGV[5])
redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[3])
redis.call('ZADD', KEYS[4], now + lasts, ARGV[3])
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
end

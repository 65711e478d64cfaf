local lasts = tonumber(ARGV[5])
redis.call('ZADD', @line@, 'NX', ARGV[4], ARGV[3])
redis.call('ZADD', @lapse@, now + lasts, ARGV[3])
for _, k in ipairs({@line@, @lapse@}) do
  if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
end

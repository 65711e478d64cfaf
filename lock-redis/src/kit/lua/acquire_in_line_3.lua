end
if holder and ARGV[3] ~= '' and holder == 'line:' .. ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  leave()
  return {1}
end
if not holder then
  -- Lapsed places matter only when the lock goes to the first in line.

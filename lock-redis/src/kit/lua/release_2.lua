
  end
  return 0
end
if granted then
  redis.call('ZREM', KEYS[3], granted)
  redis.call('ZREM', KEYS[4], granted)
end
if not granted and ARGV[3] == '' and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
else

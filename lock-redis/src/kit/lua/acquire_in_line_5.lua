
  return {0, redis.call('PTTL', KEYS[1]), 'line:' .. head, seen()}
end
join()
return {0, redis.call('PTTL', KEYS[1]), holder, seen()}

local function hand_to(m)
  local owner, ttl, desc = string.match(m, '^(%x+) (%d+) ?(.*)$')
  redis.call('SET', KEYS[1], owner, 'PX', ttl)
  if desc ~= '' then
    redis.call('SET', KEYS[6], owner .. ' ' .. desc, 'PX', ttl)
  else
    redis.call('DEL', KEYS[6])
  end
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZREM', KEYS[4], m)

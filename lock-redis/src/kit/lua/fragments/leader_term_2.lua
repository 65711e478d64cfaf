  local epoch = string.format('%.0f', fence)
  local since = string.format('%.0f', now)
  redis.call('SET', KEYS[6], owner .. ' ' .. epoch .. ' ' .. since .. ' ' .. value, 'PX', ttl)
  if tonumber(delay) > 0 then
    redis.call('SET', KEYS[7], owner .. ' ' .. delay, 'PX', tonumber(ttl) + tonumber(delay))
  end
  changed('leader ' .. version() .. ' ' .. epoch .. ' ' .. since .. ' ' .. ttl .. ' ' .. value)
  return fence
end
local function hand_to(m)
  local owner, ttl, delay, value = string.match(m, '^(%x+) (%d+) {(%d+)} (.*)$')
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZREM', KEYS[4], m)
  if not owner then return false end
  redis.call('SET', KEYS[1], owner, 'PX', ttl)
  local fence = new_term(owner, ttl, delay, value)
  redis.pcall('PUBLISH', KEYS[5], 'g ' .. owner .. ' ' .. string.format('%.0f', fence) .. ' ' .. ttl)
  return true
end

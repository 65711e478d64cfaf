local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function next_waiter()
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
  end
  while true do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if first == nil then return nil end
    if string.match(first, '^%x+ %d+$') or string.match(first, '^%x+ %d+ {') then return first end
    redis.call('ZREM', KEYS[3], first)
    redis.call('ZREM', KEYS[4], first)
  end
end
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

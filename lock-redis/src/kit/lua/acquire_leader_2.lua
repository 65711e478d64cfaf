local me = ARGV[1] .. ' ' .. ARGV[2] .. ' {' .. ARGV[5] .. '} ' .. ARGV[6]
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
  return {1, new_term(ARGV[1], ARGV[2], ARGV[5], ARGV[6])}
end
local delayed = false
if not holder then
  local marker = redis.call('GET', KEYS[7])
  delayed = marker and not owns(marker, ARGV[1])
end
if not holder and not delayed then
  local head = next_waiter()
  if head == nil or head == me then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[3], me)
    redis.call('ZREM', KEYS[4], me)
    return {1, new_term(ARGV[1], ARGV[2], ARGV[5], ARGV[6])}
  end
  hand_to(head)
end

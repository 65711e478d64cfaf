
if not holder then
  local head = next_waiter()
  if head == nil or head == me then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[3], me)
    redis.call('ZREM', KEYS[4], me)
    return {1, fenced()}
  end
  hand_to(head)
end

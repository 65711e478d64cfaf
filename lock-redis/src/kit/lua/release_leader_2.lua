local delayed = owns(redis.call('GET', KEYS[7]), ARGV[1])
if delayed and ARGV[3] == '1' then
  redis.call('DEL', KEYS[7])
  delayed = false
end
local head = nil
if not delayed then head = next_waiter() end
if head == nil or not hand_to(head) then
  redis.call('DEL', KEYS[1], KEYS[6])
  redis.pcall('PUBLISH', KEYS[5], holder)
  changed('none ' .. version())
end
return 1

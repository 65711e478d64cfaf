
local head = next_waiter()
if head == nil then
  redis.call('DEL', KEYS[1], KEYS[6])
  redis.pcall('PUBLISH', KEYS[5], holder)
else
  hand_to(head)
end
return 1

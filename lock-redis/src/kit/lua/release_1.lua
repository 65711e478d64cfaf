
local holder = redis.call('GET', KEYS[1])
local owner = ARGV[1]
if ARGV[7] == '1' then
  if not holder then return 0 end
  owner = holder
end
local granted = string.sub(owner, 1, 5) == 'line:' and string.sub(owner, 6)
local head, turn_seq
if holder ~= owner then
  if granted then

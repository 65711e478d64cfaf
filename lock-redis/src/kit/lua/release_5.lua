end
if ARGV[2] == '0' then return 1 end
local heard
if head then
  heard = announce_turn('n ' .. owner .. ' ' .. head .. ' ' .. string.format('%.0f', turn_seq), head)
else
  heard = redis.pcall('PUBLISH', KEYS[2], owner)
end
if type(heard) == 'number' then return 1 + heard end
return 1

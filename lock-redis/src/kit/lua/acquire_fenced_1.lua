
local t
local function fenced()
  if ARGV[5] ~= '' then
    redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[5], 'PX', ARGV[2])
  else
    redis.call('DEL', KEYS[6])
  end
  t = redis.call('TIME')

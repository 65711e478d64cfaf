
local readers, writer, longest = 0, false, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local kind, exp = string.sub(all[i + 1], 1, 1), tonumber(string.sub(all[i + 1], 3))
  if exp == nil or exp <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    if kind == 'w' then writer = true else readers = readers + 1 end
    if exp - now > longest then longest = exp - now end
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZREM', KEYS[4], m)
end
local me = ''
local arrival = false
if ARGV[4] ~= '' then
  me = ARGV[3] .. ':' .. ARGV[4]
  arrival = redis.call('ZSCORE', KEYS[2], me)
end
local ahead
if arrival then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. arrival)
else
  ahead = redis.call('ZRANGE', KEYS[2], 0, -1)
end
local writer_ahead = false
for _, m in ipairs(ahead) do
  if string.sub(m, 1, 1) == 'w' then writer_ahead = true end
end
local ok
if ARGV[3] == 'w' then
  ok = (not writer) and readers == 0 and #ahead == 0
else
  ok = (not writer) and not writer_ahead
end
if ok then
  if me ~= '' then
    redis.call('ZREM', KEYS[2], me)
    redis.call('ZREM', KEYS[4], me)
  end

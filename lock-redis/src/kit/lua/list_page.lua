
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = {page[1]}
for _, k in ipairs(page[2]) do
  if redis.call('TYPE', k).ok == 'string' then
    local v = redis.call('GET', k)
    if (#v == 32 and not string.find(v, '[^0-9a-fA-F]')) or string.sub(v, 1, 5) == 'line:' then
      local ttl = redis.call('PTTL', k)
      if ttl > 0 then
        table.insert(out, k)
        table.insert(out, v)
        table.insert(out, ttl)
      end
    end
  end
end
return out


local now = false
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local function mutex(k, tok, ttl)
  if redis.call('GET', k) == tok then
    return redis.call('PEXPIRE', k, ttl)
  end
  return 0
end
local function rw(k, tok, ttl)
  local v = redis.call('HGET', k, tok)
  if not v then return 0 end
  local n = clock()
  if tonumber(string.sub(v, 3)) <= n then
    redis.call('HDEL', k, tok)
    return 0
  end
  local t = tonumber(ttl)
  redis.call('HSET', k, tok, string.sub(v, 1, 1) .. ' ' .. string.format('%.0f', n + t))
  if redis.call('PTTL', k) < t then redis.call('PEXPIRE', k, t) end
  return 1
end
local function permit(k, tok, ttl)
  local exp = redis.call('ZSCORE', k, tok)
  if not exp then return 0 end
  local n = clock()
  if tonumber(exp) <= n then
    redis.call('ZREM', k, tok)
    return 0
  end
  local t = tonumber(ttl)
  redis.call('ZADD', k, n + t, tok)
  if redis.call('PTTL', k) < t then redis.call('PEXPIRE', k, t) end
  return 1
end
local function described(k, tok, ttl, d)
  local r = mutex(k, tok, ttl)
  if r == 1 then
    local v = redis.call('GET', d)
    if v and string.sub(v, 1, #tok + 1) == tok .. ' ' then redis.call('PEXPIRE', d, ttl) end
  end
  return r
end
local function leader(k, tok, ttl, d, marker, channel)
  local r = mutex(k, tok, ttl)
  if r ~= 1 then return r end
  local v = redis.call('GET', d)
  if v and string.sub(v, 1, #tok + 1) == tok .. ' ' then
    redis.call('PEXPIRE', d, ttl)
    local epoch = string.match(string.sub(v, #tok + 2), '^(%d+) ')
    local t = redis.call('TIME')
    local ver = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
    redis.pcall('PUBLISH', channel, 'extended ' .. ver .. ' ' .. (epoch or '0') .. ' ' .. ttl)
  end
  local m = redis.call('GET', marker)
  if m and string.sub(m, 1, #tok + 1) == tok .. ' ' then
    redis.call('PEXPIRE', marker, tonumber(ttl) + tonumber(string.sub(m, #tok + 2)))
  end
  return 1
end
local kinds = {m = mutex, d = described, r = rw, p = permit, l = leader}
local out = {}
local n = #ARGV / 3
local extra = n
for i = 1, n do
  local kind = ARGV[3 * i - 2]
  local f = kinds[kind]
  local d, marker, channel
  if kind == 'd' then
    extra = extra + 1
    d = KEYS[extra]
  elseif kind == 'l' then
    d, marker, channel = KEYS[extra + 1], KEYS[extra + 2], KEYS[extra + 3]
    extra = extra + 3
  end
  if not f then
    out[i] = 'ERR unknown lease kind ' .. tostring(kind)
  else
    local ok, r = pcall(f, KEYS[i], ARGV[3 * i - 1], ARGV[3 * i], d, marker, channel)
    if ok then
      out[i] = r
    elseif type(r) == 'table' then
      out[i] = tostring(r.err)
    else
      out[i] = tostring(r)
    end
  end
end
return out

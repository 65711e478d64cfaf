local function version()
  return string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local function changed(message)
  redis.pcall('PUBLISH', KEYS[8], message)
end
local function owns(v, owner)
  return v and string.sub(v, 1, #owner + 1) == owner .. ' '
end
local function new_term(owner, ttl, delay, value)

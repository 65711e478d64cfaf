
local function seen()
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%.0f', math.max(tonumber(redis.call('GET', KEYS[4])) or 0, us))
end
local function join()
  if ARGV[3] == '' then return end

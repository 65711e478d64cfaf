-- Begins the term of ARGV[1], which a round made the holder of the leader
-- key KEYS[1]: writes its info KEYS[2] (`<token> 0 <since ms> <value>`,
-- the 0 being the count of its proclaims) and, for a lock-delay ARGV[2] >
-- 0 ms, its marker KEYS[3] (`<token> <lock-delay ms>`), both with the
-- key's TTL (the marker's plus the lock-delay), and announces it on
-- KEYS[4]. ARGV[3] = since (ms), ARGV[4] = the value.
-- {1}: begun (or begun already: a repeat changes nothing); {0, ms}: the
-- marker of an earlier term that ended unresigned runs ms more; {-1}: the
-- key is not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then return {-1} end
local mine = ARGV[1] .. ' '
local function ours(v) return v and string.sub(v, 1, #mine) == mine end
if ours(redis.call('GET', KEYS[2])) then return {1} end
local marker = redis.call('GET', KEYS[3])
if marker and not ours(marker) then
  return {0, redis.call('PTTL', KEYS[3])}
end
redis.call('SET', KEYS[2], mine .. '0 ' .. ARGV[3] .. ' ' .. ARGV[4], 'PX', pttl)
local delay = tonumber(ARGV[2])
if delay > 0 then
  redis.call('SET', KEYS[3], mine .. ARGV[2], 'PX', pttl + delay)
end
local t = redis.call('TIME')
local v = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.pcall('PUBLISH', KEYS[4], 'leader ' .. v .. ' 0 ' .. ARGV[3] .. ' ' .. pttl .. ' ' .. ARGV[4])
return {1}

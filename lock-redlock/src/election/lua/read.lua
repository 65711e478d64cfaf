-- The term this node has: {owner token, proclaim number, since ms, the
-- leader key's PTTL, value}, or {} when the leader key KEYS[1] is free or
-- its holder's term has not begun here (no info KEYS[2] of its own).
local owner = redis.call('GET', KEYS[1])
if not owner then return {} end
local mine = owner .. ' '
local info = redis.call('GET', KEYS[2])
if not info or string.sub(info, 1, #mine) ~= mine then return {} end
local seq, since, value = string.match(string.sub(info, #mine + 1), '^(%d+) (%d+) (.*)$')
if not seq then return {} end
return {owner, seq, since, tostring(redis.call('PTTL', KEYS[1])), value}

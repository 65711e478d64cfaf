local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call('ZREM', KEYS[4], @id@)
local left = redis.call('ZREM', KEYS[3], @id@) == 1
if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('DEL', KEYS[5]) end
if left and (holder == 'line:' .. @id@ or (first == @id@ and not holder)) then
local head, turn_seq

local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call('ZREM', KEYS[4], granted)
local left = redis.call('ZREM', KEYS[3], granted) == 1
if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('DEL', KEYS[5]) end
if left and (holder == 'line:' .. granted or (first == granted and not holder)) then
local head, turn_seq

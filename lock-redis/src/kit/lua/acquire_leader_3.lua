local pttl = redis.call('PTTL', KEYS[1])
if delayed then pttl = redis.call('PTTL', KEYS[7]) end
return {0, pttl, last}

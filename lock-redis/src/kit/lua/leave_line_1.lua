local holder = redis.call('GET', KEYS[1])

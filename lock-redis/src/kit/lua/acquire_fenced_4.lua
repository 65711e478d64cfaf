return {0, redis.call('PTTL', KEYS[1]), last}

local t = redis.call('TIME')

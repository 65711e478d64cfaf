
  -- First in line: ahead of the current head by arrival (a waiter whose
  -- place here was taken by its own last round comes back to it).
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local head, mine = first[1], tonumber(ARGV[4])
  if head == nil or head == ARGV[3] or (ARGV[3] ~= '' and
      (mine < tonumber(first[2]) or (mine == tonumber(first[2]) and ARGV[3] < head))) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    leave()
    return {1}
  end
  join()
  local turn_seq

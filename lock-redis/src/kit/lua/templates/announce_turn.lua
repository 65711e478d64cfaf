local function announce_turn(message, head)
  local inbox = @inbox@ or ''
  local client = inbox ~= '' and string.match(head, '^(%x+)%.')
  if client then
    return redis.pcall('PUBLISH', inbox .. client, KEYS[2] .. '\n' .. message)
  end
  return redis.pcall('PUBLISH', KEYS[2], message)
end

  redis.pcall('PUBLISH', KEYS[5], 'g ' .. owner .. ' ' .. string.format('%.0f', fence) .. ' ' .. ttl)
end

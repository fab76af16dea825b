-- Records KEYS[2] once (for ARGV[2] milliseconds) while KEYS[1] holds ARGV[1].
-- Returns 1 when recorded now, 0 when already recorded, -1 when the guard differs or is gone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0

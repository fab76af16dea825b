-- Give tokens back, never above the burst. Same number encoding as spend.lua.
--
-- KEYS: each bucket's owner hash. ARGV: now_s, now_n, margin_ms, then per bucket: field, ceil_s, ceil_n,
-- dec_s, dec_n (cost x emission interval). Returns how many keys were refunded.
local B = 1000000000

local function parse(raw)
  if not raw or not string.match(raw, '^%d+$') then return nil end
  local len = string.len(raw)
  if len <= 9 then return 0, tonumber(raw) end
  return tonumber(string.sub(raw, 1, len - 9)), tonumber(string.sub(raw, len - 8))
end

local function less(as, an, bs, bn)
  return as < bs or (as == bs and an < bn)
end

local function format(s, n)
  if s == 0 then return string.format('%d', n) end
  return string.format('%d%09d', s, n)
end

local now_s, now_n, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local refunded = 0
for i = 1, #KEYS do
  local j = 3 + (i - 1) * 5
  local field = ARGV[j + 1]
  local ceil_s, ceil_n = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local dec_s, dec_n = tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
  local ts, tn = parse(redis.call('HGET', KEYS[i], field))
  if ts then
    if less(ceil_s, ceil_n, ts, tn) then ts, tn = ceil_s, ceil_n end
    if less(now_s, now_n, ts, tn) then
      local s, n = ts - dec_s, tn - dec_n
      if n < 0 then s, n = s - 1, n + B end
      if less(s, n, now_s, now_n) then s, n = now_s, now_n end
      local ds, dn = s - now_s, n - now_n
      if dn < 0 then ds, dn = ds - 1, dn + B end
      local ttl = ds * 1000 + math.ceil(dn / 1000000) + margin
      redis.call('HSET', KEYS[i], field, format(s, n))
      if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
      refunded = refunded + 1
    end
  end
end
return refunded

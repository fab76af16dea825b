-- Add debts counted elsewhere to one shard's buckets (the limiter's memory fallback handing over
-- what it counted while Redis was unreachable).
--
-- Instants are (seconds, nanoseconds) pairs, as in spend.lua. Each bucket's TAT moves later by
-- its debt, starting from now when the bucket is full, and never beyond now + the burst offset.
-- Nothing is refused: the failures a debt stands for have already happened.
--
-- KEYS: each bucket's owner hash (repeated when buckets share one).
-- ARGV: now_s, now_n, margin_ms, then per bucket: field, ceil_s, ceil_n (now + burst offset),
-- debt_s, debt_n.
-- Returns the number of buckets written.
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

local function add(as, an, bs, bn)
  local s, n = as + bs, an + bn
  if n >= B then s, n = s + 1, n - B end
  return s, n
end

local function format(s, n)
  if s == 0 then return string.format('%d', n) end
  return string.format('%d%09d', s, n)
end

local now_s, now_n, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local written = 0

for i = 1, #KEYS do
  local j = 3 + (i - 1) * 5
  local field = ARGV[j + 1]
  local ceil_s, ceil_n = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local debt_s, debt_n = tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
  local base_s, base_n = now_s, now_n
  local ts, tn = parse(redis.call('HGET', KEYS[i], field))
  if ts and less(base_s, base_n, ts, tn) then base_s, base_n = ts, tn end
  local s, n = add(base_s, base_n, debt_s, debt_n)
  if less(ceil_s, ceil_n, s, n) then s, n = ceil_s, ceil_n end
  -- The owner lives at least until this bucket is full again, plus the margin.
  local ds, dn = s - now_s, n - now_n
  if dn < 0 then ds, dn = ds - 1, dn + B end
  local ttl = ds * 1000 + math.ceil(dn / 1000000) + margin
  if ttl < margin then ttl = margin end
  redis.call('HSET', KEYS[i], field, format(s, n))
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
  written = written + 1
end
return written

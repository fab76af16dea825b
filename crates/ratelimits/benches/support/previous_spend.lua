-- The spend script of the previous layout (one hash per owner, kept here unchanged): the memory
-- bench measures it as the baseline, and the upgrade tests use it to write buckets as an instance
-- of the previous release would.
-- Decide and spend one shard's part of a batch atomically.
--
-- Redis Lua numbers are doubles, which cannot hold Unix nanoseconds exactly, so every instant is
-- a pair (seconds, nanoseconds) and the script only compares and adds pairs. The remaining tokens
-- and waits are computed by the application from the stored TAT this script returns, with the
-- same arithmetic, so the script never does division.
--
-- KEYS: each bucket's owner hash (repeated when buckets share one).
-- ARGV: now_s, now_n, margin_ms, then per bucket: field, ceil_s, ceil_n (now + burst offset),
-- inc_s, inc_n (cost x emission interval), flags (1 = enforced, 2 = spends).
-- Returns per key: the stored TAT ('' if none) and 1 if written, else 0.
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

-- Writes a bucket and keeps its owner alive at least until the bucket is full again + margin.
local function store(key, field, s, n, now_s, now_n, margin)
  local ds, dn = s - now_s, n - now_n
  if dn < 0 then ds, dn = ds - 1, dn + B end
  local ttl = ds * 1000 + math.ceil(dn / 1000000) + margin
  if ttl < margin then ttl = margin end
  redis.call('HSET', key, field, format(s, n))
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

local now_s, now_n, margin = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local count = #KEYS
local raw, allowed, new_s, new_n, clamped, fields = {}, {}, {}, {}, {}, {}
local denied = false

for i = 1, count do
  local j = 3 + (i - 1) * 6
  fields[i] = ARGV[j + 1]
  local ceil_s, ceil_n = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local inc_s, inc_n = tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
  local flags = tonumber(ARGV[j + 6])
  local value = redis.call('HGET', KEYS[i], fields[i])
  local base_s, base_n = now_s, now_n
  clamped[i] = false
  if value then
    raw[i] = value
    local ts, tn = parse(value)
    if ts then
      -- A TAT beyond now + burst offset predates a raised limit: clamp it (boulder#8785).
      if less(ceil_s, ceil_n, ts, tn) then
        ts, tn = ceil_s, ceil_n
        clamped[i] = true
      end
      if less(base_s, base_n, ts, tn) then base_s, base_n = ts, tn end
    end
  else
    raw[i] = ''
  end
  new_s[i], new_n[i] = add(base_s, base_n, inc_s, inc_n)
  allowed[i] = not less(ceil_s, ceil_n, new_s[i], new_n[i])
  if clamped[i] then
    -- Kept for the write-back below if nothing is spent.
    clamped[i] = { ceil_s, ceil_n }
  end
  if (not allowed[i]) and flags % 2 == 1 then denied = true end
end

local out = {}
for i = 1, count do
  local flags = tonumber(ARGV[3 + (i - 1) * 6 + 6])
  local written = 0
  if (not denied) and allowed[i] and flags >= 2 then
    store(KEYS[i], fields[i], new_s[i], new_n[i], now_s, now_n, margin)
    written = 1
  elseif clamped[i] then
    store(KEYS[i], fields[i], clamped[i][1], clamped[i][2], now_s, now_n, margin)
  end
  out[2 * i - 1] = raw[i]
  out[2 * i] = written
end
return out

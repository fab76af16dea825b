-- Decide and spend one shard's part of a batch atomically.
--
-- Redis Lua numbers are doubles, which cannot hold Unix nanoseconds exactly, so every instant is
-- a pair (seconds, nanoseconds) and the script only compares and adds pairs. The remaining tokens
-- and waits are computed by the application from the stored TAT this script returns, with the
-- same arithmetic, so the script never does division.
--
-- A bucket is a field of a group hash (store/redis_layout.rs). The previous layout kept it as a
-- field of its owner's hash, on the same shard: that field is read too and the later of the two
-- TATs counts, and a write moves the bucket over (sets the group's field, deletes the old one),
-- so an upgrade neither refills a bucket nor counts it twice.
--
-- KEYS: per bucket, its group hash and its owner's hash of the previous layout.
-- ARGV: now_s, now_n, margin_ms, sweep_every, then per bucket: field, previous field, ceil_s,
-- ceil_n (now + burst offset), inc_s, inc_n (cost x emission interval), flags (1 = enforced,
-- 2 = spends).
-- Returns per bucket: the stored TAT ('' if none) and 1 if written, else 0.
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

-- The later of the bucket's TATs in both layouts, as the stored text ('' if none), and whether
-- the previous layout holds it.
local function read(group, field, old_key, old_field)
  local value = redis.call('HGET', group, field)
  local old = redis.call('HGET', old_key, old_field)
  if not old then return value or '', false end
  if not value then return old, true end
  local vs, vn = parse(value)
  local os, on = parse(old)
  if os and ((not vs) or less(vs, vn, os, on)) then return old, true end
  return value, true
end

-- Deletes the group's fields whose bucket has been full for longer than the margin.
local function sweep(group, now_s, now_n, margin)
  local margin_s = math.floor(margin / 1000)
  local limit_s, limit_n = now_s - margin_s, now_n - (margin - margin_s * 1000) * 1000000
  if limit_n < 0 then limit_s, limit_n = limit_s - 1, limit_n + B end
  local all = redis.call('HGETALL', group)
  local stale = {}
  for i = 1, #all, 2 do
    local ts, tn = parse(all[i + 1])
    if not ts or not less(limit_s, limit_n, ts, tn) then stale[#stale + 1] = all[i] end
  end
  if #stale > 0 then redis.call('HDEL', group, unpack(stale)) end
end

-- Writes a bucket into its group, drops its previous-layout field, keeps the group alive at
-- least until the bucket is full again + margin, and sweeps the group when the write added a
-- field and the count reached a multiple of sweep_every.
local function store(group, field, old_key, old_field, had_old, s, n, now_s, now_n, margin, every)
  local ds, dn = s - now_s, n - now_n
  if dn < 0 then ds, dn = ds - 1, dn + B end
  local ttl = ds * 1000 + math.ceil(dn / 1000000) + margin
  if ttl < margin then ttl = margin end
  local added = redis.call('HSET', group, field, format(s, n))
  if had_old then redis.call('HDEL', old_key, old_field) end
  if redis.call('PTTL', group) < ttl then redis.call('PEXPIRE', group, ttl) end
  if added == 1 and redis.call('HLEN', group) % every == 0 then
    sweep(group, now_s, now_n, margin)
  end
end

local now_s, now_n = tonumber(ARGV[1]), tonumber(ARGV[2])
local margin, every = tonumber(ARGV[3]), tonumber(ARGV[4])
local count = #KEYS / 2
local raw, had_old, allowed, new_s, new_n, clamped = {}, {}, {}, {}, {}, {}
local denied = false

for i = 1, count do
  local j = 4 + (i - 1) * 7
  local ceil_s, ceil_n = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local inc_s, inc_n = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
  local flags = tonumber(ARGV[j + 7])
  raw[i], had_old[i] = read(KEYS[2 * i - 1], ARGV[j + 1], KEYS[2 * i], ARGV[j + 2])
  local base_s, base_n = now_s, now_n
  clamped[i] = false
  local ts, tn = parse(raw[i])
  if ts then
    -- A TAT beyond now + burst offset predates a raised limit: clamp it (boulder#8785).
    if less(ceil_s, ceil_n, ts, tn) then
      ts, tn = ceil_s, ceil_n
      -- Kept for the write-back below if nothing is spent.
      clamped[i] = { ceil_s, ceil_n }
    end
    if less(base_s, base_n, ts, tn) then base_s, base_n = ts, tn end
  end
  new_s[i], new_n[i] = add(base_s, base_n, inc_s, inc_n)
  allowed[i] = not less(ceil_s, ceil_n, new_s[i], new_n[i])
  if (not allowed[i]) and flags % 2 == 1 then denied = true end
end

local out = {}
for i = 1, count do
  local j = 4 + (i - 1) * 7
  local flags = tonumber(ARGV[j + 7])
  local group, field, old_key, old_field = KEYS[2 * i - 1], ARGV[j + 1], KEYS[2 * i], ARGV[j + 2]
  local written = 0
  if (not denied) and allowed[i] and flags >= 2 then
    store(group, field, old_key, old_field, had_old[i], new_s[i], new_n[i], now_s, now_n, margin,
      every)
    written = 1
  elseif clamped[i] then
    store(group, field, old_key, old_field, had_old[i], clamped[i][1], clamped[i][2], now_s, now_n,
      margin, every)
  end
  out[2 * i - 1] = raw[i]
  out[2 * i] = written
end
return out

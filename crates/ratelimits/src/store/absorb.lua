-- Add debts counted elsewhere to one shard's buckets (the limiter's memory fallback handing over
-- what it counted while Redis was unreachable). Same layout and number encoding as spend.lua.
--
-- Each bucket's TAT moves later by its debt, starting from now when the bucket is full, and
-- never beyond now + the burst offset. Nothing is refused: the failures a debt stands for have
-- already happened.
--
-- KEYS: per bucket, its group hash and its owner's hash of the previous layout.
-- ARGV: now_s, now_n, margin_ms, sweep_every, then per bucket: field, previous field, ceil_s,
-- ceil_n (now + burst offset), debt_s, debt_n.
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
local written = 0
for i = 1, #KEYS / 2 do
  local j = 4 + (i - 1) * 6
  local group, field, old_key, old_field = KEYS[2 * i - 1], ARGV[j + 1], KEYS[2 * i], ARGV[j + 2]
  local ceil_s, ceil_n = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local debt_s, debt_n = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
  local value, had_old = read(group, field, old_key, old_field)
  local base_s, base_n = now_s, now_n
  local ts, tn = parse(value)
  if ts and less(base_s, base_n, ts, tn) then base_s, base_n = ts, tn end
  local s, n = add(base_s, base_n, debt_s, debt_n)
  if less(ceil_s, ceil_n, s, n) then s, n = ceil_s, ceil_n end
  store(group, field, old_key, old_field, had_old, s, n, now_s, now_n, margin, every)
  written = written + 1
end
return written

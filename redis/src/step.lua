-- polite-redis: one decision for one pace key, atomically (SPEC §4.3).
-- KEYS[1] the send log (a sorted set: permit id -> server time of grant, µs)
-- KEYS[2] the key's state (a hash: cool-down, learnt quota, adaptive rate,
--         retry-budget tokens, the permit sequence)
-- ARGV: see polite-redis src/step.rs (`Step::invoke`), in this order.
-- Every instant is the Redis server's clock (TIME), in microseconds.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local log, st = KEYS[1], KEYS[2]
local want = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local extra = tonumber(ARGV[4])
local cool_push = tonumber(ARGV[5])
local learnt_limit = tonumber(ARGV[6])
local learnt_window = tonumber(ARGV[7])
local learn_max = tonumber(ARGV[8])
local throttled = tonumber(ARGV[9])
local succeeded = tonumber(ARGV[10])
local adaptive = ARGV[11] == '1'
local budget_cap = tonumber(ARGV[12])
local budget_delta = tonumber(ARGV[13])
local ttl = tonumber(ARGV[14])
local throttled_sent = tonumber(ARGV[15])
-- The key's epoch as the process last saw it (0: never), and how many
-- send instants it seeds the log with: its local sends (while Redis did
-- not answer), then its earlier grants (only if the log was lost).
local epoch_seen = tonumber(ARGV[16])
local n_local = tonumber(ARGV[17])
local n_granted = tonumber(ARGV[18])
-- How much later than the first slot that frees a refusal may name, so
-- that the permits wanted are all free at the instant it names.
local gather = tonumber(ARGV[19])
-- How many permits the process expects to want (its sends of the last
-- hold): a refusal names the instant by which that many are free.
local demand = tonumber(ARGV[20])
local seeds_at = 21
local returns_at = seeds_at + n_local + n_granted

local s = redis.call('HMGET', st, 'cool', 'ql', 'qw', 'ar', 'wmax', 'lt', 'mr', 'mc', 'mb', 'tat', 'bt', 'born')
-- A key's state is born once; a different (or no) birth than the process
-- saw means the log it was granted from is gone (restart, eviction).
local born = tonumber(s[12] or '0')
local lost = epoch_seen ~= 0 and born ~= epoch_seen
if born == 0 then born = now end

-- Permits a process gives back unused (ids of a lost log mean nothing).
if not lost then
  for i = returns_at, #ARGV do redis.call('ZREM', log, ARGV[i]) end
end

local cool = tonumber(s[1] or '0')
local ql, qw = tonumber(s[2] or '0'), tonumber(s[3] or '0')
local ar, wmax, lt = tonumber(s[4] or '0'), tonumber(s[5] or '0'), tonumber(s[6] or '0')
local mr, mc, mb = tonumber(s[7] or '0'), tonumber(s[8] or '0'), tonumber(s[9] or '0')
local tat = tonumber(s[10] or '0')

-- A cool-down never shortens.
if cool_push > cool then cool = cool_push end
-- A learnt quota (RateLimit-Policy) replaces the previous one.
if learnt_limit > 0 and learnt_window > 0 then ql, qw = learnt_limit, learnt_window end

-- Which window is in force: configured, else learnt (capped).
local reason = 1
if limit == 0 and learn_max > 0 and ql > 0 and qw > 0 then
  limit, window, reason = math.min(ql, learn_max), qw, 2
end

-- The measured send rate of the fleet (0.5 s buckets, smoothed), as the
-- AWS SDKs' adaptive mode measures its own.
if mb == 0 then mb = now end
if now - mb >= 500000 then
  mr = 0.8 * (mc * 1000000 / (now - mb)) + 0.2 * mr
  mc, mb = 0, now
end
-- Grants are logged while a window is in force, and while one may be
-- learnt (so that the sends before the quota was known count once it is;
-- only the newest learn_max matter then).
local logged = limit > 0 or learn_max > 0
-- With a log, the fleet's sends in the last second are a better measure
-- (at once, not after a bucket closes).
local measured = mr
if logged then
  local c = redis.call('ZCOUNT', log, string.format('%.0f', now - 1000000), '+inf')
  if c > measured then measured = c end
end
-- The adaptive rate (CUBIC, AWS constants: beta 0.7, C 0.4), fleet-wide.
if adaptive then
  -- A throttled send made before the last cut says nothing of the rate
  -- since: only a later one cuts again (else one burst of 429s seen by
  -- many processes would cut the fleet's rate once per answer).
  if throttled > 0 and throttled_sent > lt then
    local base = measured
    if ar > 0 and (measured == 0 or ar < measured) then base = ar end
    if base < 0.5 then base = 0.5 end
    wmax, ar, lt = base, math.max(base * 0.7, 0.5), now
  elseif succeeded > 0 and ar > 0 then
    local k = (wmax * 0.3 / 0.4) ^ (1 / 3)
    local dt = (now - lt) / 1000000
    local r = 0.4 * (dt - k) ^ 3 + wmax
    if measured > 0 and r > 2 * measured then r = 2 * measured end
    ar = math.max(r, 0.5)
  end
end

-- Sends the log does not hold yet: a process's local sends while Redis
-- did not answer, and after a loss its grants too. They count as grants
-- made when they were sent (never later than now).
if logged then
  local last = seeds_at + n_local - 1
  if lost then last = returns_at - 1 end
  for i = seeds_at, last do
    local at = math.min(tonumber(ARGV[i]), now)
    local id = redis.call('HINCRBY', st, 'seq', 1)
    redis.call('ZADD', log, string.format('%.0f', at), id)
  end
end

local granted = 0
local next_at = 0
if cool > now then
  next_at, reason = cool, 4
else
  granted = want
  if limit > 0 and granted > 0 then
    local hold = window + extra
    -- A grant at t ages out when t + hold <= now, as RateThrottle's do, so
    -- the slot that frees first is always later than now.
    redis.call('ZREMRANGEBYSCORE', log, '-inf', string.format('%.0f', now - hold))
    local count = redis.call('ZCARD', log)
    local free = limit - count
    if free < granted then granted = math.max(free, 0) end
    if granted < want then
      -- The slot that frees first after this grant, or, up to `gather`
      -- later, the last of the slots the permits wanted (or expected)
      -- wait for: the process asks then, once, for all of them (else each
      -- slot of a burst freeing a few ms after the other costs a round
      -- trip, refused as often as granted).
      local from = count + granted - limit
      local to = math.min(count + math.max(want, demand) - limit - 1, count - 1)
      local slots = redis.call('ZRANGE', log, from, to, 'WITHSCORES')
      if slots[2] then
        local first = tonumber(slots[2])
        next_at = first + hold
        for i = 4, #slots, 2 do
          local at = tonumber(slots[i])
          if at > first + gather then break end
          next_at = at + hold
        end
      else
        next_at = now + hold
      end
    end
  end
  if adaptive and ar > 0 and granted > 0 then
    if tat > now then
      granted, reason = 0, 3
      if tat > next_at then next_at = tat end
    else
      granted = 1
      tat = math.max(tat, now) + 1000000 / ar
    end
  end
end

local ids = {}
for i = 1, granted do
  local id = redis.call('HINCRBY', st, 'seq', 1)
  if logged then redis.call('ZADD', log, now, id) end
  ids[i] = id
end
if limit == 0 and learn_max > 0 and granted > 0 then
  redis.call('ZREMRANGEBYRANK', log, 0, -(learn_max + 1))
end
mc = mc + granted

local tokens = -1
if budget_cap > 0 then
  tokens = tonumber(s[11] or tostring(budget_cap)) - budget_delta
  if tokens < 0 then tokens = 0 end
  if tokens > budget_cap then tokens = budget_cap end
end

local fields = {'cool', cool, 'mr', tostring(mr), 'mc', mc, 'mb', mb, 'born', string.format('%.0f', born)}
if ql > 0 then
  for _, v in ipairs({'ql', ql, 'qw', qw}) do fields[#fields + 1] = v end
end
if adaptive then
  for _, v in ipairs({'ar', tostring(ar), 'wmax', tostring(wmax), 'lt', lt, 'tat', math.floor(tat)}) do
    fields[#fields + 1] = v
  end
end
if tokens >= 0 then
  fields[#fields + 1] = 'bt'
  fields[#fields + 1] = tokens
end
redis.call('HSET', st, unpack(fields))
redis.call('PEXPIRE', st, ttl)
if logged then redis.call('PEXPIRE', log, math.max(ttl, math.ceil((window + extra) / 1000))) end

local interval = 0
if ar > 0 then interval = math.floor(1000000 / ar) end
local out = {math.floor(now / 1000000), now % 1000000, math.floor(next_at), reason, limit, window, interval, tokens, born}
for i = 1, granted do out[#out + 1] = ids[i] end
return out

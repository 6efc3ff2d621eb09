package redis

import (
	goredis "github.com/redis/go-redis/v9"
)

// applyScript applies a batch of operations, each guarded by the version stored in its version
// key. Versions are compared as fixed-width decimal strings (19 digits; 38 for streams, the
// version followed by the log offset), because Lua numbers are doubles and lose precision
// beyond 2^53.
//
//	KEYS: per operation, the view key and its version key
//	ARGV[1] stream MAXLEN (0: no trimming)   ARGV[2] delete marker TTL (s)   ARGV[3] "1": guard on
//	then per operation: kind, version ("" = unguarded), ttl (s, 0 = none), n, then n arguments
//
// kinds:
//
//	H  replace a hash: the first argument m counts the (field, value) arguments to HSET, the
//	   rest are fields to HDEL (NULL columns). The kind is followed by the fingerprint of the
//	   row's column names, kept in the marker after the version: when the stored row had the
//	   same columns (or was deleted), no other field can be left; otherwise a hash left with
//	   more fields (columns the row no longer has) is deleted and written again
//	P  update a hash: the same arguments, but other fields stay (unchanged columns)
//	J  SET the one argument (a JSON document)
//	D  DEL, and keep the version as a marker for ARGV[2] seconds
//	X  XADD the n arguments (field, value pairs); applied only if strictly newer than the
//	   stored (version, offset), so a replay appends nothing twice
//
// A marker holds the version (19 digits) followed by the fingerprint ("-" for a delete); a
// stream marker the version and offset. A write applies when its version is at least the stored one (equal versions only occur
// inside one source transaction, whose changes arrive in order). The script returns
// {conflicts, deletes, i1, err1, i2, err2, ...}: the count of operations refused as stale, the
// count of deletes applied and, for each
// operation the server refused (e.g. WRONGTYPE), its 1-based number and the error. An error
// that is the server's state rather than the record's (OOM, READONLY, BUSY, ...) fails the
// whole call, which the sink retries.
var applyScript = goredis.NewScript(`
local maxlen = tonumber(ARGV[1])
local marker = tonumber(ARGV[2])
local guard = ARGV[3] == '1'
local zero = '0000000000000000000'
local conflicts = 0
local out = {0, 0}
local deletes = 0
local a = 4
local op = 0
local transient = {OOM = true, READONLY = true, BUSY = true, LOADING = true, MASTERDOWN = true, NOREPLICAS = true, TRYAGAIN = true, MISCONF = true}

local function apply(key, vkey, kind, ver, ttl, first, n)
  local fp = string.sub(kind, 2)
  kind = string.sub(kind, 1, 1)
  local cur, curv, curfp = false, false, false
  if guard then
    cur = redis.call('GET', vkey)
    if cur then
      if kind == 'X' then
        curv = cur
      else
        curv, curfp = string.sub(cur, 1, 19), string.sub(cur, 20)
      end
      if ver ~= '' then
        if kind == 'X' then
          if curv >= ver then return true end
        elseif curv > ver then
          return true
        end
      end
    end
  end
  if kind == 'H' or kind == 'P' then
    local m = tonumber(ARGV[first])
    if m > 0 then redis.call('HSET', key, unpack(ARGV, first + 1, first + m)) end
    if n - 1 - m > 0 then redis.call('HDEL', key, unpack(ARGV, first + 1 + m, first + n - 1)) end
    if kind == 'H' then
      -- fields of columns the row no longer has must go: only possible when the stored row had
      -- other columns (its fingerprint differs) or when sluice did not write it
      if curfp ~= fp and curfp ~= '-' and redis.call('HLEN', key) > m / 2 then
        redis.call('DEL', key)
        if m > 0 then redis.call('HSET', key, unpack(ARGV, first + 1, first + m)) end
      end
    else
      fp = curfp or ''
    end
  elseif kind == 'J' then
    redis.call('SET', key, ARGV[first])
  elseif kind == 'D' then
    redis.call('DEL', key)
    fp = '-'
  elseif kind == 'X' then
    if maxlen > 0 then
      redis.call('XADD', key, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, first + n - 1))
    else
      redis.call('XADD', key, '*', unpack(ARGV, first, first + n - 1))
    end
  end
  if ttl > 0 and kind ~= 'D' and kind ~= 'X' and redis.call('EXISTS', key) == 1 then
    redis.call('EXPIRE', key, ttl)
  end
  if guard then
    local v = ver
    if v == '' then v = curv or zero end
    if kind ~= 'X' then v = v .. fp end
    if kind == 'D' or kind == 'X' then
      redis.call('SET', vkey, v, 'EX', marker)
    elseif ttl > 0 then
      redis.call('SET', vkey, v, 'EX', ttl)
    else
      redis.call('SET', vkey, v)
    end
  end
  return false
end

for i = 1, #KEYS, 2 do
  op = op + 1
  local kind, ver, ttl, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local first = a + 4
  a = first + n
  local ok, res = pcall(apply, KEYS[i], KEYS[i + 1], kind, ver, ttl, first, n)
  if ok then
    if res then
      conflicts = conflicts + 1
    elseif string.sub(kind, 1, 1) == 'D' then
      deletes = deletes + 1
    end
  else
    local msg = res
    if type(res) == 'table' then msg = res.err end
    msg = tostring(msg)
    local code = string.match(msg, '^%-?(%u+)')
    if code and transient[code] then return redis.error_reply(msg) end
    out[#out + 1] = op
    out[#out + 1] = msg
  end
end
out[1] = conflicts
out[2] = deletes
return out
`)

-- One increment per request, as single.lua, with a header of the same length on every
-- request: `Idempotency-Key: <prefix>-<thread>-<n>` (unique per request, so none is a
-- replay) or, for the side-by-side run without keys, `X-Bench-Padding: <the same value>`.
-- Both build each request in request(), so wrk spends the same on either.
-- Usage: wrk ... -s keyed.lua URL -- KEYS key|pad PREFIX
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

local keys, header, prefix, n = 100000, "Idempotency-Key", "r", 0
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  keys = tonumber(args[1] or "100000")
  if args[2] == "pad" then header = "X-Bench-Padding" end
  prefix = (args[3] or "r") .. "-" .. tostring(tid or 0) .. "-"
  math.randomseed(1000 + (tid or 0))
end

function request()
  n = n + 1
  headers[header] = prefix .. n
  return wrk.format("POST", nil, headers,
    string.format('{"record_type": 1, "record_id": %d}', math.random(1, keys)))
end

-- done(): the result line bench/run reads, shared by the request scripts.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "result.lua")

-- LINES increments per request: POST /v1/increments, Content-Type: application/x-ndjson,
-- one {"record_type": 1, "record_id": N} per line, N uniform in 1..KEYS.
-- Usage: wrk ... -s ndjson.lua URL -- KEYS LINES
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

local reqs, n, i = {}, 32, 0
function init(args)
  local keys = tonumber(args[1] or "100000")
  local lines = tonumber(args[2] or "1000")
  math.randomseed(2000 + (tid or 0))
  local headers = { ["Content-Type"] = "application/x-ndjson" }
  for k = 1, n do
    local parts = {}
    for l = 1, lines do
      parts[l] = string.format('{"record_type": 1, "record_id": %d}\n', math.random(1, keys))
    end
    reqs[k] = wrk.format("POST", nil, headers, table.concat(parts))
  end
end

function request()
  i = i % n + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKRESULT requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end

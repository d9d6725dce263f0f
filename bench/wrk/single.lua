-- One increment per request: POST /v1/increments, Content-Type: application/json,
-- body {"record_type": 1, "record_id": N}, N uniform in 1..KEYS.
-- Usage: wrk ... -s single.lua URL -- KEYS
-- BENCH_DELAY_MS (environment, may be fractional) paces every connection: wrk waits
-- that long (on average; wrk's timer has 1 ms resolution, so the integer delay is drawn
-- around the mean) before sending its next request.
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

local reqs, n, i = {}, 4096, 0
function init(args)
  local keys = tonumber(args[1] or "100000")
  math.randomseed(1000 + (tid or 0))
  local headers = { ["Content-Type"] = "application/json" }
  for k = 1, n do
    reqs[k] = wrk.format("POST", nil, headers,
      string.format('{"record_type": 1, "record_id": %d}', math.random(1, keys)))
  end
end

function request()
  i = i % n + 1
  return reqs[i]
end

local mean_delay = tonumber(os.getenv("BENCH_DELAY_MS") or "0") or 0
if mean_delay > 0 then
  local base = math.floor(mean_delay)
  local frac = mean_delay - base
  function delay()
    if math.random() < frac then return base + 1 end
    return base
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKRESULT requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end

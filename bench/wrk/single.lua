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

-- done(): the result line bench/run reads, shared by the request scripts.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "result.lua")

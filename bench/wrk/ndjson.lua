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

-- done(): the result line bench/run reads, shared by the request scripts.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "result.lua")

-- The one line bench/run reads from every wrk run (loaded by the request scripts).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKRESULT requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end

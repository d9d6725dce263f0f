# Ruby: count events with Net::HTTP over one kept-alive connection, short timeouts.
# Fire-and-forget calls send no Idempotency-Key; pass key: for a call whose retry must
# not count twice. A call never raises: it returns true (counted) or false, and blocks
# at most about 1 s without a key (each of connect, send and answer within what is left
# of it) and about 5 s with one.
require "net/http"
require "json"
require "securerandom"

class SlottedCounter
  def initialize(base = ENV.fetch("SLOTTED_URL", "http://127.0.0.1:8080"), token: ENV["SLOTTED_TOKEN"])
    uri = URI(base)
    @token = token
    @http = Net::HTTP.new(uri.host, uri.port)
    @http.keep_alive_timeout = 20   # below the daemon's http.idle_timeout (30 s)
    @mutex = Mutex.new              # one connection: one request at a time
  end

  def count(record_type, record_id, delta: 1, key: nil)
    req = Net::HTTP::Post.new("/v1/increments",
                              "Content-Type" => "application/json",
                              "Prefer" => "return=minimal")
    req["Authorization"] = "Bearer #{@token}" if @token
    req["Idempotency-Key"] = key if key
    req.body = JSON.generate(record_type: record_type, record_id: record_id.to_s, delta: delta)
    ends = now + (key ? 5.0 : 1.0)
    @mutex.synchronize do
      (0..).each do |attempt|
        wait = rand * [5.0, 0.1 * 2**attempt].min
        begin
          left = ends - now
          @http.open_timeout = @http.read_timeout = @http.write_timeout = [left, 0.001].max
          @http.start unless @http.started?
          res = @http.request(req)
          return true if %w[202 204].include?(res.code)
          return warn_false("answered #{res.code}: #{res.body}") unless res.code == "503" && key
          wait = [wait, res["Retry-After"].to_i].max   # 503: nothing applied
        rescue StandardError => e                      # refused, timeouts, resets, DNS
          @http.finish if @http.started?
          # Without a key: one attempt (a retry after a timeout could count twice).
          return warn_false(e.message) unless key
        end
        return warn_false("no answer before the deadline") if now + wait >= ends
        sleep wait
      end
    end
  end

  private

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def warn_false(why)
    warn "slotted-counterd: not counted: #{why}"
    false
  end
end

if $PROGRAM_NAME == __FILE__
  counter = SlottedCounter.new
  100.times { counter.count("repo_downloads", 42) }
  counter.count("repo_downloads", 44, key: "order-3001")
  ok = counter.count("repo_downloads", 44, key: "order-3001")   # a retry: counted once
  puts ok ? "counted" : "not counted yet, queue it"
end

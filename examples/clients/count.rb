# Ruby: count events with Net::HTTP over one kept-alive connection, short timeouts.
# Fire-and-forget calls send no Idempotency-Key; pass key: for a call whose retry must
# not count twice.
require "net/http"
require "json"
require "securerandom"

class SlottedCounter
  def initialize(base = ENV.fetch("SLOTTED_URL", "http://127.0.0.1:8080"))
    uri = URI(base)
    @http = Net::HTTP.new(uri.host, uri.port)
    @http.open_timeout = 1
    @http.read_timeout = 1
    @http.write_timeout = 1
    @http.keep_alive_timeout = 20   # below the daemon's http.idle_timeout (30 s)
    @mutex = Mutex.new              # one connection: one request at a time
  end

  def count(record_type, record_id, delta: 1, key: nil)
    req = Net::HTTP::Post.new("/v1/increments",
                              "Content-Type" => "application/json",
                              "Prefer" => "return=minimal")
    req["Idempotency-Key"] = key if key
    req.body = JSON.generate(record_type: record_type, record_id: record_id.to_s, delta: delta)
    attempts = key ? 4 : 1          # without a key a retry could count twice
    @mutex.synchronize do
      attempts.times do
        begin
          @http.start unless @http.started?
          res = @http.request(req)
          return true if %w[202 204].include?(res.code)
          raise "slotted-counterd answered #{res.code}: #{res.body}" unless res.code == "503"
          sleep [res["Retry-After"].to_i, 5].min
        rescue Net::OpenTimeout, Net::ReadTimeout, Errno::ECONNRESET, EOFError, IOError
          @http.finish if @http.started?
          raise unless key
        end
      end
    end
    false
  end
end

if $PROGRAM_NAME == __FILE__
  counter = SlottedCounter.new
  100.times { counter.count("repo_downloads", 42) }
  counter.count("repo_downloads", 44, key: "order-3001")
  counter.count("repo_downloads", 44, key: "order-3001")   # a retry: counted once
  puts "counted"
end

#pragma once
// Request in, response out (README: HTTP API). The router does no I/O itself: increments go to
// the backend synchronously (memory only); database-bound routes are handed to the
// backend, which answers later from another thread through the same `respond`.
//
// Thread-safety: handle() and check_header() may run on any number of threads at once.

#include <atomic>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "config/config.hpp"
#include "http/backend.hpp"
#include "http/token_check.hpp"
#include "ingest/parser.hpp"
#include "ingest/table_limits.hpp"
#include "metrics/metrics.hpp"
#include "model/keyed_request.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::http {

namespace beast_http = boost::beast::http;
using request = beast_http::request<beast_http::string_body>;
using request_header = beast_http::request_header<>;
using response = beast_http::response<beast_http::string_body>;
// Called exactly once per request, from any thread.
using respond_fn = std::function<void(response&&)>;

class router {
  struct endpoint;

 public:
  // What a router answers: the API's listeners answer every path (but /metrics when
  // metrics.listen puts it elsewhere); the metrics.listen listener only /metrics and
  // /healthz. A path another scope answers is a 404 here.
  enum class scope { api, metrics_only };

  router(const config::daemon_config& cfg, backend& b, metrics::registry& m,
         const ingest::table_limits& limits, scope s = scope::api);

  // The endpoint whose path and method a header check accepted.
  class accepted_route {
    friend class router;
    const endpoint* row_ = nullptr;
  };

  // Refuses a request on its header alone (unknown path, wrong method, missing
  // token, wrong content type), before a client is told to send its body. Every
  // request goes through it first. When it refuses nothing and `accepted` is given, it
  // says there which endpoint answers the request.
  std::optional<response> check_header(const request_header& req,
                                       accepted_route* accepted = nullptr);

  // Answers a request whose header check_header() accepted: the session passes what the
  // check found (the endpoint table is searched once per request); without it, the
  // table is searched again.
  void handle(request&& req, respond_fn respond);
  void handle(request&& req, accepted_route accepted, respond_fn respond);

  // Applies what a reload may change live: the bearer token and the declared counters
  // (accept_undeclared_types too). Thread-safe; a request in progress finishes with
  // the settings it started with.
  void reconfigure(const config::daemon_config& cfg);

  // Counts an answer the session gave itself (a malformed or oversized request) in
  // http_requests_total: under the route its header check accepted (`accepted` as the
  // check left it; empty before a header was read), or else `unparsed`.
  void count_session_answer(accepted_route accepted, unsigned status);

  // A JSON error response; `index` names the item to blame.
  static response error_response(unsigned version, beast_http::status status,
                                 std::string_view message,
                                 std::optional<std::size_t> index = std::nullopt);

  // The one mapping of the daemon's expected failures (errc, model/errc.hpp) to an
  // HTTP status: 503 with Retry-After (5 s; 1 s while draining) for those a retry cures,
  // 422 for those it does not, 500 for a code of another category. The body's error is
  // `message`, or else the code's own text.
  static response failure_response(unsigned version, std::error_code e,
                                   std::optional<std::string_view> message = std::nullopt);

 private:
  struct route_match;
  struct reply;
  // One row of the endpoint table (router.cpp): a request whose path matches `pattern`
  // and whose method is `method` (or HEAD, for GET) is answered by `handler`, counted
  // under `route`.
  using handler = void (router::*)(const request&, const route_match&, const reply&);
  struct endpoint {
    metrics::route route;
    // A literal path, or one with {placeholders}, each a whole non-empty path segment.
    std::string_view pattern;
    beast_http::verb method;
    bool needs_auth;
    handler handle;
  };
  static const endpoint endpoints[];

  route_match match(const request_header& req) const;
  std::optional<response> refuse(const request_header& req, const route_match& m);
  // One handler per route.
  void handle_increments(const request& req, const route_match& m, const reply& answer);
  void handle_flush(const request& req, const route_match& m, const reply& answer);
  void handle_rollup(const request& req, const route_match& m, const reply& answer);
  void handle_metrics(const request& req, const route_match& m, const reply& answer);
  void handle_healthz(const request& req, const route_match& m, const reply& answer);
  void handle_readyz(const request& req, const route_match& m, const reply& answer);
  void handle_counter(const request& req, const route_match& m, const reply& answer);
  void handle_reset(const request& req, const route_match& m, const reply& answer);
  // GET /v1/counters/{record_type}/{record_id}/series?granularity=G&from=F&to=T (README: HTTP API).
  void handle_series(const request& req, const route_match& m, const reply& answer);
  // A keyed request whose times resolve_times() refused (`bad`): answered as a replay or
  // a conflict when the backend knows its key (find_keyed), else with `bad` (400).
  void refuse_unless_known(const request& req, std::string_view key,
                           std::span<const ingest::increment> increments, ingest::parse_error bad,
                           const reply& answer);
  void answer_added(const reply& answer, unsigned version, std::size_t n, bool minimal,
                    const backend_result& r);
  // backend::submit's answer: answer_added's, now or later.
  struct added_answer;
  // GET /v1/counters/{type}?ids=... and GET /v1/top/{type} (README: HTTP API):
  // totals_routes.cpp.
  void handle_counters_many(const request& req, const route_match& m, const reply& answer);
  void handle_top(const request& req, const route_match& m, const reply& answer);
  // The record type a path names (a number or a declared counter's name), or the 400.
  std::variant<std::uint32_t, response> type_of(std::string_view text, unsigned version);
  // The counter a /v1/counters/{record_type}/{record_id} path names, or the 400 that
  // says why it names none (a bad number, an undeclared type).
  std::variant<store::counter_key, response> counter_of(const route_match& m, unsigned version);

  // What reconfigure() replaces, swapped whole so a request sees one consistent set.
  struct live_settings {
    ingest::type_registry types;
    std::optional<token_check> auth;  // set when http.auth_token_file is
  };
  static std::shared_ptr<const live_settings> make_live(const config::daemon_config& cfg);

  // Under a mutex rather than std::atomic<std::shared_ptr>: libstdc++ 12 guards that with
  // a lock bit inside the pointer that ThreadSanitizer cannot see, and it reported a
  // reload racing a request (CredentialsDb.AReloadKeepsTheCommandLineCredentials).
  class live_holder {
   public:
    explicit live_holder(std::shared_ptr<const live_settings> p) : p_(std::move(p)) {}
    std::shared_ptr<const live_settings> load() const {
      util::lock_guard lock(mutex_);
      return p_;
    }
    // The old settings are released after the lock, by the caller's copy.
    void store(std::shared_ptr<const live_settings> p) {
      util::lock_guard lock(mutex_);
      p_.swap(p);
    }

   private:
    mutable util::mutex mutex_;
    std::shared_ptr<const live_settings> p_ GUARDED_BY(mutex_);
  };
  live_holder live_;
  // At most this many buckets in one series request (README: HTTP API).
  static constexpr std::int64_t max_series_points = 1000;
  // Top-N: at most this many items, over at most this many buckets.
  static constexpr std::size_t max_top_limit = 1000;
  static constexpr std::int64_t max_top_buckets = 400;
  // Fixed for the process's life, as the store's (see config::plan_reload).
  const store::bucket_spec buckets_;
  // The counters that keep top-N totals (counters[].top); fixed as buckets_ is.
  const store::top_spec top_;
  // The counters that dedupe items with a `client` (counters[].dedupe); fixed as buckets_.
  const store::dedupe_spec dedupe_;
  const ingest::table_limits& limits_;
  std::size_t max_items_;
  backend& backend_;
  metrics::registry& metrics_;
  // Whether this router answers a route (scope, and metrics.listen for the API's).
  bool answers(metrics::route r) const;
  scope scope_;
  bool metrics_elsewhere_;
};

}  // namespace slotted::http

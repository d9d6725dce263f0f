#include "http/router.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "http/router_internal.hpp"
#include "ingest/clients.hpp"
#include "util/json.hpp"
#include "util/log.hpp"

namespace slotted::http {

using namespace detail;

namespace {

// How a refused increments request is counted: every "not now" but the pending limit
// as wal_unavailable (the WAL, a key being logged, the keys table not reachable).
metrics::reject_reason rejected_as(std::error_code e) {
  if (e == errc::over_limit) return metrics::reject_reason::pending_limit;
  if (e == errc::draining) return metrics::reject_reason::draining;
  if (e == errc::conflict || e == errc::out_of_range || e == errc::invalid_input)
    return metrics::reject_reason::invalid;
  return metrics::reject_reason::wal_unavailable;
}

metrics::reject_reason reason_for(status s) {
  if (s == status::unauthorized) return metrics::reject_reason::unauthorized;
  if (s == status::unsupported_media_type) return metrics::reject_reason::unsupported_media_type;
  return metrics::reject_reason::invalid;
}

// RFC 7240: what one Prefer field says about `return`: true for `return=minimal`, false
// for another value, nothing when it has no `return` preference (names and values
// compared case-insensitively, the value possibly quoted; other preferences and
// parameters are ignored).
std::optional<bool> return_preference(std::string_view prefer) {
  const auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (!prefer.empty()) {
    const auto comma = prefer.find(',');
    std::string_view item = prefer.substr(0, comma);
    prefer = comma == std::string_view::npos ? std::string_view{} : prefer.substr(comma + 1);
    item = trim(item.substr(0, item.find(';')));
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || !boost::beast::iequals(trim(item.substr(0, eq)), "return"))
      continue;
    std::string_view value = trim(item.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    return boost::beast::iequals(value, "minimal");
  }
  return std::nullopt;
}

// Whether the request asks for `return=minimal`. A client may send its preferences in
// several Prefer fields, the same as one comma-separated field (RFC 7240 section 2):
// the first `return` preference in any of them decides.
bool prefers_minimal(const request& req) {
  const auto [first, last] = req.equal_range(field::prefer);
  for (auto f = first; f != last; ++f) {
    if (const auto minimal = return_preference(f->value())) return *minimal;
  }
  return false;
}

std::int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The endpoint table: every path the daemon answers, with its method, whether it needs
// the bearer token, and its handler. Rows of one pattern are one path: together they
// name its methods (the Allow header of a 405). A pattern with placeholders claims every
// path with its literal start and end, tried in table order, so the series comes before
// the counter's own path: "/v1/counters/3/series" is the series' and a 404, never the
// counter "3" with id "series".
const router::endpoint router::endpoints[] = {
    {metrics::route::increments, "/v1/increments", beast_http::verb::post, true,
     &router::handle_increments},
    {metrics::route::flush, "/v1/flush", beast_http::verb::post, true, &router::handle_flush},
    {metrics::route::rollup, "/v1/rollup", beast_http::verb::post, true, &router::handle_rollup},
    {metrics::route::metrics, "/metrics", beast_http::verb::get, false, &router::handle_metrics},
    {metrics::route::healthz, "/healthz", beast_http::verb::get, false, &router::handle_healthz},
    {metrics::route::readyz, "/readyz", beast_http::verb::get, false, &router::handle_readyz},
    // The series is read-only: a DELETE there is a 405 like any other method, so no
    // other path reaches the reset.
    {metrics::route::counters, "/v1/counters/{record_type}/{record_id}/series",
     beast_http::verb::get, true, &router::handle_series},
    {metrics::route::counters, "/v1/counters/{record_type}/{record_id}", beast_http::verb::get,
     true, &router::handle_counter},
    // DELETE of the counter's own path resets it (its own route for metrics).
    {metrics::route::reset, "/v1/counters/{record_type}/{record_id}", beast_http::verb::delete_,
     true, &router::handle_reset},
    // Many counters of one type (?ids=...), and the top-N of one type (totals_routes.cpp).
    {metrics::route::counters_many, "/v1/counters/{record_type}", beast_http::verb::get, true,
     &router::handle_counters_many},
    {metrics::route::top, "/v1/top/{record_type}", beast_http::verb::get, true,
     &router::handle_top},
};

namespace {
// Whether `path` is one `pattern` claims (see router::endpoints): its literal start and
// end, and between them one non-empty segment for each placeholder, into `params`.
// `claimed` tells a path the pattern is for apart, even when its segments do not fit
// (then a 404, never another row's).
bool match_pattern(std::string_view pattern, std::string_view path,
                   std::array<std::string_view, 2>& params, bool& claimed) {
  const auto open = pattern.find('{');
  if (open == std::string_view::npos) {
    claimed = path == pattern;
    return claimed;
  }
  const auto close = pattern.rfind('}');
  const std::string_view prefix = pattern.substr(0, open), suffix = pattern.substr(close + 1);
  if (path.size() < prefix.size() + suffix.size() || !path.starts_with(prefix) ||
      !path.ends_with(suffix))
    return false;
  std::string_view middle = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  const auto wanted = static_cast<std::size_t>(
      std::count(pattern.begin() + open, pattern.begin() + close + 1, '{'));
  // A pattern with a literal end claims every path with its start and end; one ending in
  // a placeholder only those with as many segments there as it has placeholders (so
  // "/v1/counters/3" is the many-counter route's, "/v1/counters/3/5" the counter's).
  claimed = !suffix.empty() ||
            static_cast<std::size_t>(std::count(middle.begin(), middle.end(), '/')) + 1 == wanted;
  if (!claimed) return false;
  for (std::size_t i = 0; i < wanted; ++i) {
    const auto slash = middle.find('/');
    const std::string_view segment = middle.substr(0, slash);
    if (segment.empty() || i >= params.size() ||
        (slash == std::string_view::npos) != (i + 1 == wanted))
      return false;
    params[i] = segment;
    middle = slash == std::string_view::npos ? std::string_view{} : middle.substr(slash + 1);
  }
  return true;
}
}  // namespace

router::router(const config::daemon_config& cfg, backend& b, metrics::registry& m,
               const ingest::table_limits& limits, scope s)
    : live_(make_live(cfg)),
      buckets_(config::bucket_spec_of(cfg)),
      top_(config::top_spec_of(cfg)),
      dedupe_(config::dedupe_spec_of(cfg)),
      limits_(limits),
      max_items_(cfg.http.max_items_per_request),
      backend_(b),
      metrics_(m),
      scope_(s),
      metrics_elsewhere_(!cfg.metrics_listen.empty()) {}

bool router::answers(metrics::route r) const {
  if (scope_ == scope::metrics_only)
    return r == metrics::route::metrics || r == metrics::route::healthz;
  return !(metrics_elsewhere_ && r == metrics::route::metrics);
}

std::shared_ptr<const router::live_settings> router::make_live(const config::daemon_config& cfg) {
  std::vector<std::pair<std::string, std::uint32_t>> declared;
  for (const auto& c : cfg.counters) declared.emplace_back(c.name, c.record_type);
  auto live = std::make_shared<live_settings>();
  live->types = ingest::type_registry(std::move(declared), cfg.accept_undeclared_types);
  if (!cfg.http.auth_token.empty()) live->auth.emplace(cfg.http.auth_token);
  return live;
}

void router::reconfigure(const config::daemon_config& cfg) {
  live_.store(make_live(cfg));
}

response router::error_response(unsigned version, status s, std::string_view message,
                                std::optional<std::size_t> index) {
  std::string body = "{\"error\": ";
  json::append_string(body, message);
  if (index) body += ", \"index\": " + std::to_string(*index);
  body += "}";
  return json_response(version, s, std::move(body));
}

response router::failure_response(unsigned v, std::error_code e,
                                  std::optional<std::string_view> message) {
  status s = status::internal_server_error;
  std::string_view retry_after;  // seconds; none: a retry does not help
  if (e.category() == slotted_category()) {
    switch (static_cast<errc>(e.value())) {
      case errc::over_limit:
      case errc::unavailable:
      case errc::not_exact_yet:
      case errc::retry_later:
      case errc::outcome_unknown:
      case errc::database_unavailable:
      case errc::wal_write_failed:
      case errc::wal_sync_failed:
      case errc::deadline_passed:
      case errc::read_timed_out:
        s = status::service_unavailable;
        retry_after = "5";
        break;
      case errc::draining:
        s = status::service_unavailable;
        retry_after = "1";
        break;
      case errc::out_of_range:
      case errc::conflict:
      case errc::too_costly:
        s = status::unprocessable_entity;
        break;
      case errc::invalid_input:
        s = status::bad_request;
        break;
    }
  }
  auto res = message && !message->empty() ? error_response(v, s, *message)
                                          : error_response(v, s, e.message());
  if (!retry_after.empty()) res.set(field::retry_after, retry_after);
  return res;
}

namespace {
// Whether an endpoint of `method` answers a request of `asked`: HEAD is GET without the
// body (RFC 9110 9.3.2); the session leaves the body out.
bool serves(beast_http::verb method, beast_http::verb asked) {
  return asked == method || (asked == beast_http::verb::head && method == beast_http::verb::get);
}
}  // namespace

router::route_match router::match(const request_header& req) const {
  std::string_view target = req.target();
  target = target.substr(0, target.find('?'));
  const std::span<const endpoint> table(endpoints);
  route_match m;
  for (auto first = table.begin(); first != table.end();) {
    // The rows of one path are adjacent in the table.
    auto last = std::find_if(first, table.end(),
                             [&](const endpoint& e) { return e.pattern != first->pattern; });
    if (!answers(first->route)) {  // a path of the other listener's: no such path here
      first = last;
      continue;
    }
    bool claimed = false;
    if (match_pattern(first->pattern, target, m.params, claimed)) {
      m.path_rows = std::span(first, last);
      m.row = &*first;
      for (const auto& e : m.path_rows) {
        if (serves(e.method, req.method())) {
          m.row = &e;
          m.method_allowed = true;
          break;
        }
      }
      return m;
    }
    if (claimed) return m;
    first = last;
  }
  return m;
}

std::optional<response> router::refuse(const request_header& req, const route_match& m) {
  const unsigned v = req.version();
  if (m.row == nullptr) {
    return error_response(v, status::not_found, "no such path");
  }
  if (!m.method_allowed) {
    const std::string allow = m.allow();
    auto res = error_response(v, status::method_not_allowed, "method not allowed; use " + allow);
    res.set(field::allow, allow);
    return res;
  }
  const auto live = live_.load();
  if (m.row->needs_auth && live->auth) {
    const std::string_view header = req[field::authorization];
    constexpr std::string_view prefix = "bearer ";  // the scheme is case-insensitive (RFC 7235)
    const bool bearer = header.size() > prefix.size() &&
                        boost::beast::iequals(header.substr(0, prefix.size()), prefix);
    if (!bearer || !live->auth->matches(header.substr(prefix.size()))) {
      auto res = error_response(v, status::unauthorized, "missing or wrong bearer token");
      res.set(field::www_authenticate, "Bearer");
      return res;
    }
  }
  if (m.route() == metrics::route::increments && !ingest::format_for(req[field::content_type])) {
    return error_response(v, status::unsupported_media_type,
                          "Content-Type must be application/json or application/x-ndjson");
  }
  return std::nullopt;
}

std::optional<response> router::check_header(const request_header& req, accepted_route* accepted) {
  const auto m = match(req);
  auto refused = refuse(req, m);
  if (refused) {
    metrics_.observe_request(m.route(), refused->result_int(), 0.0);
    if (m.route() == metrics::route::increments) metrics_.reject(reason_for(refused->result()), 1);
  } else if (accepted != nullptr) {
    accepted->row_ = m.row;
  }
  return refused;
}

void router::count_session_answer(accepted_route accepted, unsigned status) {
  metrics_.count_answer(accepted.row_ != nullptr ? accepted.row_->route : metrics::route::unparsed,
                        status);
}

void router::handle(request&& req, respond_fn respond) {
  accepted_route accepted;
  accepted.row_ = match(req).row;
  handle(std::move(req), accepted, std::move(respond));
}

void router::handle(request&& req, accepted_route accepted, respond_fn respond) {
  // check_header() has passed this header already: path, method, token and content
  // type are not checked a second time here. The path's placeholders are read again
  // from the request (the header's view of them does not survive its move here).
  route_match m;
  const endpoint* row = accepted.row_;
  const bool method_matches = row != nullptr && serves(row->method, req.method());
  const std::string_view target = req.target();
  bool claimed = false;
  // Else not the header that was checked: no such path.
  if (method_matches &&
      match_pattern(row->pattern, target.substr(0, target.find('?')), m.params, claimed)) {
    m.row = row;
    m.method_allowed = true;
  }
  const reply answer{this, m.route(), clock::now(), std::move(respond)};
  if (m.row == nullptr)
    return answer(error_response(req.version(), status::not_found, "no such path"));
  (this->*(m.row->handle))(req, m, answer);
}

namespace {
// The answer to a flush or a rollup: {"<name>": count}, or `failed` and why.
template <typename Reply>
auto count_answer(const Reply& answer, unsigned v, std::string_view failed, std::string_view name) {
  return guarded(answer, v, [answer, v, failed, name](const backend_result& r) {
    if (const auto e = r.failure())
      return answer(router::failure_response(v, e, std::string(failed) + r.error));
    answer(json_response(v, status::ok,
                         "{\"" + std::string(name) + "\": " + std::to_string(r.count) + "}"));
  });
}
}  // namespace

void router::handle_flush(const request& req, const route_match&, const reply& answer) {
  backend_.flush_now(count_answer(answer, req.version(), "flush failed: ", "flushed_rows"));
}

void router::handle_rollup(const request& req, const route_match&, const reply& answer) {
  backend_.rollup_now(count_answer(answer, req.version(), "rollup failed: ", "records"));
}

void router::handle_metrics(const request& req, const route_match&, const reply& answer) {
  response res{status::ok, req.version()};
  res.set(field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = backend_.metrics_text();
  res.prepare_payload();
  answer(std::move(res));
}

void router::handle_healthz(const request& req, const route_match&, const reply& answer) {
  answer(json_response(req.version(), status::ok, "{\"status\": \"ok\"}"));
}

void router::handle_readyz(const request& req, const route_match&, const reply& answer) {
  const unsigned v = req.version();
  if (backend_.draining()) return answer(failure_response(v, errc::draining, "draining"));
  if (!backend_.ready())
    return answer(failure_response(v, errc::database_unavailable, "database not reachable"));
  answer(json_response(v, status::ok, "{\"status\": \"ready\"}"));
}

// Answers a request of `n` increments with the backend's result: at once, from the
// reply on the stack, or later, from the callback later() builds with a copy of it.
struct router::added_answer final : backend::submit_answer {
  added_answer(router* r, const reply& a, unsigned version, std::size_t count, bool is_minimal)
      : self(r), answer(a), v(version), n(count), minimal(is_minimal) {}
  void now(backend_result r) const override { self->answer_added(answer, v, n, minimal, r); }
  // The reply (and the session's callback in it) is copied once: each copy of it costs
  // allocations on the path every request with a WAL or a key takes.
  backend::done_fn later() const override {
    return
        [self = self, answer = answer, v = v, n = n, minimal = minimal](const backend_result& r) {
          detail::guarded_call(answer, v, [&] { self->answer_added(answer, v, n, minimal, r); });
        };
  }

  router* self;
  const reply& answer;
  unsigned v;
  std::size_t n;
  bool minimal;
};

void router::handle_increments(const request& req, const route_match&, const reply& answer) {
  const unsigned v = req.version();
  // Idempotency-Key (README: HTTP API): one field with a valid key, or nothing applied.
  std::string_view idempotency_key;
  bool keyed = false;
  if (const auto [first, last] = req.equal_range("Idempotency-Key"); first != last) {
    keyed = true;
    idempotency_key = first->value();
    if (std::next(first) != last || !idempotency::valid_key(idempotency_key)) {
      metrics_.reject(metrics::reject_reason::invalid, 1);
      return answer(error_response(v, status::bad_request,
                                   "Idempotency-Key must be sent once, as 1 to 128 characters of "
                                   "[A-Za-z0-9._:-]; nothing of this request was applied"));
    }
  }
  // Reused by this thread's requests: one without WAL and key allocates nothing here.
  thread_local ingest::increment_request submitted;
  auto& increments = submitted.increments;
  const auto format = *ingest::format_for(req[field::content_type]);
  const auto live = live_.load();
  if (auto err =
          ingest::parse_increments(req.body(), format, live->types, max_items_, increments)) {
    const bool too_many = err->status == 413;
    metrics_.reject(too_many ? metrics::reject_reason::too_large : metrics::reject_reason::invalid,
                    increments.empty() ? 1 : increments.size());
    return answer(error_response(v, too_many ? status::payload_too_large : status::bad_request,
                                 err->message, err->index));
  }
  if (auto bad = limits_.check(increments)) {
    metrics_.reject(metrics::reject_reason::invalid, increments.size());
    return answer(error_response(v, status::bad_request, bad->message, bad->index));
  }
  if (auto bad = ingest::resolve_times(increments, buckets_, unix_seconds_now())) {
    if (keyed)
      return refuse_unless_known(req, idempotency_key, increments, std::move(*bad), answer);
    metrics_.reject(metrics::reject_reason::invalid, increments.size());
    return answer(error_response(v, status::bad_request, bad->message, bad->index));
  }
  // Items with a `client` (model/uniques.hpp): their counters must dedupe. Not with an
  // Idempotency-Key yet (docs/known-limits.md). (Most requests have none: no clock read.)
  if (ingest::has_clients(increments)) {
    if (auto bad = ingest::check_clients(increments, dedupe_, unix_seconds_now())) {
      metrics_.reject(metrics::reject_reason::invalid, increments.size());
      return answer(error_response(v, status::bad_request, bad->message, bad->index));
    }
    if (keyed) {
      metrics_.reject(metrics::reject_reason::invalid, increments.size());
      return answer(error_response(v, status::bad_request,
                                   "\"client\" is not accepted with an Idempotency-Key yet; "
                                   "nothing of this request was applied"));
    }
  }
  // Not refused while draining: a request read during the stop (the last one of a
  // connection, or the first of one accepted as the listener closed) is applied and
  // answered, and the final flush writes it. With systemd's sockets, what the stopping
  // daemon has not read waits in the socket for the next one, so a restart refuses none.
  submitted.key.assign(idempotency_key);  // empty without one: not keyed()
  if (keyed) {
    submitted.hash = idempotency::hash_of(increments);
    submitted.received_ms = idempotency::now_ms();
  }
  backend_.submit(submitted,
                  added_answer(this, answer, v, increments.size(), prefers_minimal(req)));
}

void router::refuse_unless_known(const request& req, std::string_view key,
                                 std::span<const ingest::increment> increments,
                                 ingest::parse_error bad, const reply& answer) {
  // The key's answer comes first (README: HTTP API, Idempotency-Key): a retry of a
  // request accepted before is a replay (or a 422 for another body) even when its `at`
  // has left the retention since, or is ahead of this instance's clock; only a key
  // nobody accepted gets the request's own 400. hash_of() reads `at` as sent alone, so
  // the hash is the first copy's whether or not resolve_times() got through the items.
  const unsigned v = req.version();
  const std::size_t n = increments.size();
  const bool minimal = prefers_minimal(req);
  backend_.find_keyed(
      std::string(key), idempotency::hash_of(increments), idempotency::now_ms(),
      guarded(answer, v,
              [this, v, n, minimal, answer, bad = std::move(bad)](const backend_result& r) {
                if (r.code || r.replayed) {
                  return answer_added(answer, v, n, minimal, r);
                }
                metrics_.reject(metrics::reject_reason::invalid, n);
                answer(error_response(v, status::bad_request, bad.message, bad.index));
              }));
}

void router::answer_added(const reply& answer, unsigned v, std::size_t n, bool minimal,
                          const backend_result& r) {
  if (const auto e = r.failure()) {
    metrics_.reject(rejected_as(e), n);
    // The failure's own text (the WAL, a key being logged, the database), else the code's.
    return answer(failure_response(v, e, r.error));
  }
  // A replay (Idempotency-Key) was applied once already: answered as the first time
  // (with its count), and said to be a replay.
  const bool replayed = r.replayed;
  if (replayed) {
    n = r.count;
  } else {
    metrics_.increments_accepted.Increment(static_cast<double>(n));
  }
  if (minimal) {
    // No body at all: an nginx mirror subrequest keeps its upstream connection
    // only for answers without one.
    response res{status::no_content, v};
    res.set(field::preference_applied, "return=minimal");
    if (replayed) res.set("Idempotent-Replayed", "true");
    return answer(std::move(res));
  }
  auto res = json_response(v, status::accepted, "{\"accepted\": " + std::to_string(n) + "}");
  if (replayed) res.set("Idempotent-Replayed", "true");
  answer(std::move(res));
}

}  // namespace slotted::http

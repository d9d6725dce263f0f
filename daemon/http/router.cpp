#include "http/router.hpp"

#include <charconv>

#include "util/json.hpp"
#include "util/log.hpp"

namespace slotted::http {

namespace {

// persisted + pending can pass int64 (a total near the count column's limit plus what
// is pending): added in 128 bits and printed exactly.
std::string decimal(__int128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return std::to_string(static_cast<std::int64_t>(v));
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : v;
  std::string digits;
  for (; u > 0; u /= 10) digits.insert(digits.begin(), static_cast<char>('0' + u % 10));
  return negative ? "-" + digits : digits;
}
using beast_http::field;
using beast_http::status;
using clock = std::chrono::steady_clock;

response json_response(unsigned version, status s, std::string body) {
  response res{s, version};
  res.set(field::content_type, "application/json");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

response retry_later(unsigned version, std::string_view message, std::string_view seconds = "1") {
  auto res = router::error_response(version, status::service_unavailable, message);
  res.set(field::retry_after, seconds);
  return res;
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

template <typename Int>
bool parse_decimal(std::string_view s, Int& out) {
  if (s.empty() || s.size() > 20) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace

struct router::route_match {
  metrics::route route = metrics::route::not_found;
  const char* allow = "";  // methods allowed on the path
  beast_http::verb method = beast_http::verb::unknown;
  bool needs_auth = false;
  std::string_view counter_type;  // for GET /v1/counters/{t}/{id}
  std::string_view counter_id;
  bool series = false;  // GET /v1/counters/{t}/{id}/series
};

router::router(const config::daemon_config& cfg, backend& b, metrics::registry& m,
               const ingest::table_limits& limits)
    : live_(make_live(cfg)),
      buckets_(config::bucket_spec_of(cfg)),
      limits_(limits),
      max_items_(cfg.http.max_items_per_request),
      backend_(b),
      metrics_(m) {}

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

router::route_match router::match(const request_header& req) const {
  std::string_view target = req.target();
  target = target.substr(0, target.find('?'));
  route_match m;
  if (target == "/v1/increments") {
    m = {metrics::route::increments, "POST", beast_http::verb::post, true, {}, {}};
  } else if (target == "/v1/flush") {
    m = {metrics::route::flush, "POST", beast_http::verb::post, true, {}, {}};
  } else if (target == "/v1/rollup") {
    m = {metrics::route::rollup, "POST", beast_http::verb::post, true, {}, {}};
  } else if (target == "/metrics") {
    m = {metrics::route::metrics, "GET, HEAD", beast_http::verb::get, false, {}, {}};
  } else if (target == "/healthz") {
    m = {metrics::route::healthz, "GET, HEAD", beast_http::verb::get, false, {}, {}};
  } else if (target == "/readyz") {
    m = {metrics::route::readyz, "GET, HEAD", beast_http::verb::get, false, {}, {}};
  } else if (target.starts_with("/v1/counters/")) {
    std::string_view rest = target.substr(std::string_view("/v1/counters/").size());
    constexpr std::string_view series_suffix = "/series";
    const bool series = rest.ends_with(series_suffix);
    if (series) rest.remove_suffix(series_suffix.size());
    const auto slash = rest.find('/');
    if (slash != std::string_view::npos && slash > 0 && slash + 1 < rest.size() &&
        rest.find('/', slash + 1) == std::string_view::npos) {
      // DELETE of the counter's own path resets it (its own route for metrics); GET
      // reads it. Its series is read-only: a DELETE there is a 405 like any other
      // method, so no other path reaches the reset.
      if (series) {
        m = {metrics::route::counters, "GET, HEAD", beast_http::verb::get, true, {}, {}};
      } else if (req.method() == beast_http::verb::delete_) {
        m = {metrics::route::reset, "GET, HEAD, DELETE", beast_http::verb::delete_, true, {}, {}};
      } else {
        m = {metrics::route::counters, "GET, HEAD, DELETE", beast_http::verb::get, true, {}, {}};
      }
      m.counter_type = rest.substr(0, slash);
      m.counter_id = rest.substr(slash + 1);
      m.series = series;
    }
  }
  return m;
}

std::optional<response> router::refuse(const request_header& req, const route_match& m) {
  const unsigned v = req.version();
  if (m.route == metrics::route::not_found) {
    return error_response(v, status::not_found, "no such path");
  }
  // HEAD is GET without the body (RFC 9110 9.3.2); the session leaves the body out.
  const bool head_of_get =
      req.method() == beast_http::verb::head && m.method == beast_http::verb::get;
  if (req.method() != m.method && !head_of_get) {
    auto res = error_response(v, status::method_not_allowed,
                              std::string("method not allowed; use ") + m.allow);
    res.set(field::allow, m.allow);
    return res;
  }
  const auto live = live_.load();
  if (m.needs_auth && live->auth) {
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
  if (m.route == metrics::route::increments && !ingest::format_for(req[field::content_type])) {
    return error_response(v, status::unsupported_media_type,
                          "Content-Type must be application/json or application/x-ndjson");
  }
  return std::nullopt;
}

std::optional<response> router::check_header(const request_header& req) {
  const auto m = match(req);
  auto refused = refuse(req, m);
  if (refused) {
    metrics_.observe_request(m.route, refused->result_int(), 0.0);
    if (m.route == metrics::route::increments) metrics_.reject(reason_for(refused->result()), 1);
  }
  return refused;
}

// Answers one request: counts it (route, status, time taken) and hands the response on.
// Built on the stack for each request; only the asynchronous routes copy it.
struct router::reply {
  router* self;
  metrics::route route;
  clock::time_point started;
  respond_fn respond;

  void operator()(response&& res) const {
    self->metrics_.observe_request(route, res.result_int(),
                                   std::chrono::duration<double>(clock::now() - started).count());
    respond(std::move(res));
  }
};

namespace {
// Wraps a backend's answer callback, which runs on a database or WAL thread. An
// exception there (memory running out while the answer is built or handed to the
// connection) would escape into that thread and end the process; instead it is logged
// and the request answered 500 (closing its connection) if that still works. The
// session takes only the first answer to a request, so a 500 after an answer that got
// through changes nothing.
template <typename Reply, typename F>
auto guarded(const Reply& answer, unsigned v, F f) {
  return [answer, v, f = std::move(f)](auto&&... args) {
    try {
      f(std::forward<decltype(args)>(args)...);
    } catch (const std::exception& e) {
      log::error("HTTP answer from a backend thread failed: ", e.what());
      try {
        auto res = router::error_response(v, status::internal_server_error, "internal error");
        res.keep_alive(false);
        answer(std::move(res));
      } catch (...) {
      }
    }
  };
}
}  // namespace

void router::handle(request&& req, respond_fn respond) {
  // check_header() has passed this header already: path, method, token and content
  // type are not checked a second time here.
  const auto m = match(req);
  const reply answer{this, m.route, clock::now(), std::move(respond)};
  const unsigned v = req.version();
  switch (m.route) {
    case metrics::route::increments:
      return handle_increments(req, answer);
    case metrics::route::counters:
      return m.series ? handle_series(req, m, answer) : handle_counter(req, m, answer);
    case metrics::route::reset:
      return handle_reset(req, m, answer);
    case metrics::route::flush:
      return backend_.flush_now(guarded(answer, v, [v, answer](const backend_result& r) {
        if (r.outcome != backend_result::status::done)
          return answer(retry_later(v, "flush failed: " + r.error, "5"));
        answer(json_response(v, status::ok, "{\"flushed_rows\": " + std::to_string(r.count) + "}"));
      }));
    case metrics::route::rollup:
      return backend_.rollup_now(guarded(answer, v, [v, answer](const backend_result& r) {
        if (r.outcome != backend_result::status::done)
          return answer(retry_later(v, "rollup failed: " + r.error, "5"));
        answer(json_response(v, status::ok, "{\"records\": " + std::to_string(r.count) + "}"));
      }));
    case metrics::route::metrics: {
      response res{status::ok, v};
      res.set(field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = backend_.metrics_text();
      res.prepare_payload();
      return answer(std::move(res));
    }
    case metrics::route::healthz:
      return answer(json_response(v, status::ok, "{\"status\": \"ok\"}"));
    case metrics::route::readyz:
      if (backend_.draining()) return answer(retry_later(v, "draining"));
      if (!backend_.ready()) return answer(retry_later(v, "database not reachable", "5"));
      return answer(json_response(v, status::ok, "{\"status\": \"ready\"}"));
    default:
      return answer(error_response(v, status::not_found, "no such path"));
  }
}

void router::handle_increments(const request& req, const reply& answer) {
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
  thread_local std::vector<ingest::increment> increments;
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
  // Not refused while draining: a request read during the stop (the last one of a
  // connection, or the first of one accepted as the listener closed) is applied and
  // answered, and the final flush writes it. With systemd's sockets, what the stopping
  // daemon has not read waits in the socket for the next one, so a restart refuses none.
  const std::size_t n = increments.size();
  const bool minimal = prefers_minimal(req);
  if (keyed) {
    idempotency::keyed_request r{std::string(idempotency_key), idempotency::hash_of(increments),
                                 increments, idempotency::now_ms()};
    return backend_.add_keyed(
        std::move(r), guarded(answer, v, [this, v, n, minimal, answer](const backend_result& r) {
          answer_added(answer, v, n, minimal, r);
        }));
  }
  if (backend_.durable()) {
    return backend_.add_durable(
        std::exchange(increments, {}),
        guarded(answer, v, [this, v, n, minimal, answer](const backend_result& r) {
          answer_added(answer, v, n, minimal, r);
        }));
  }
  answer_added(answer, v, n, minimal, backend_.add(increments));
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
                if (r.outcome != backend_result::status::done) {
                  return answer_added(answer, v, n, minimal, r);
                }
                metrics_.reject(metrics::reject_reason::invalid, n);
                answer(error_response(v, status::bad_request, bad.message, bad.index));
              }));
}

void router::answer_added(const reply& answer, unsigned v, std::size_t n, bool minimal,
                          const backend_result& r) {
  // A replay (Idempotency-Key) was applied once already: answered as the first time
  // (with its count), and said to be a replay.
  const bool replayed = r.outcome == backend_result::status::replayed;
  switch (r.outcome) {
    case backend_result::status::done:
    case backend_result::status::replayed: {
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
      return answer(std::move(res));
    }
    case backend_result::status::conflict:
      metrics_.reject(metrics::reject_reason::invalid, n);
      return answer(error_response(v, status::unprocessable_entity,
                                   "this Idempotency-Key was used with another body; nothing of "
                                   "this request was applied"));
    case backend_result::status::over_limit:
      metrics_.reject(metrics::reject_reason::pending_limit, n);
      return answer(
          retry_later(v, "too many pending counters (flush.max_pending_keys); retry later", "5"));
    case backend_result::status::unavailable:
      metrics_.reject(metrics::reject_reason::wal_unavailable, n);
      return answer(retry_later(
          v, r.error.empty() ? "the write-ahead log cannot be written; retry later" : r.error,
          "5"));
    case backend_result::status::out_of_range:
      // Well-formed, but a counter's pending sum would pass 2^62: it stays as it was.
      metrics_.reject(metrics::reject_reason::invalid, n);
      return answer(error_response(
          v, status::unprocessable_entity,
          "a counter's pending sum would pass 2^62 (4611686018427387904) in either direction; "
          "nothing of this request was applied"));
  }
}

std::variant<store::counter_key, response> router::counter_of(const route_match& m, unsigned v) {
  std::uint32_t type = 0;
  std::uint64_t id = 0;
  const auto live = live_.load();
  if (!parse_decimal(m.counter_type, type) || type > ingest::max_record_type) {
    const auto named = live->types.by_name(m.counter_type);
    if (!named) {
      return error_response(v, status::bad_request,
                            std::string("record_type must be an integer in ") +
                                ingest::record_type_range + " or a declared counter name");
    }
    type = *named;
  }
  if (!live->types.allows(type)) {
    return error_response(
        v, status::bad_request,
        "record_type " + std::to_string(type) + " is not declared under counters");
  }
  if (!parse_decimal(m.counter_id, id)) {
    return error_response(
        v, status::bad_request,
        std::string("record_id must be an integer in ") + ingest::record_id_range);
  }
  return store::counter_key{type, id};
}

void router::handle_counter(const request& req, const route_match& m, const reply& answer) {
  const unsigned v = req.version();
  auto parsed = counter_of(m, v);
  if (auto* refused = std::get_if<response>(&parsed)) return answer(std::move(*refused));
  const auto key = std::get<store::counter_key>(parsed);
  const auto type = key.record_type;
  const auto id = key.record_id;
  backend_.read_counter(
      key, guarded(answer, v, [v, type, id, answer](const backend_result& r) {
        if (r.outcome != backend_result::status::done) return answer(retry_later(v, r.error, "5"));
        answer(json_response(v, status::ok,
                             "{\"record_type\": " + std::to_string(type) + ", \"record_id\": \"" +
                                 std::to_string(id) + "\", \"count\": " +
                                 decimal(r.persisted + r.pending) +
                                 ", \"persisted\": " + decimal(r.persisted) +
                                 ", \"pending\": " + std::to_string(r.pending) + "}"));
      }));
}

void router::handle_reset(const request& req, const route_match& m, const reply& answer) {
  const unsigned v = req.version();
  auto parsed = counter_of(m, v);
  if (auto* refused = std::get_if<response>(&parsed)) return answer(std::move(*refused));
  const auto key = std::get<store::counter_key>(parsed);
  // As for increments: an id the counters table's columns cannot hold names no counter,
  // so it is a 400 rather than a ledger row, a synced WAL record and a flush cycle.
  const ingest::increment named{key.record_type, key.record_id, 0};
  if (auto bad = limits_.check(std::span(&named, 1)))
    return answer(error_response(v, status::bad_request, bad->message));
  if (backend_.draining()) {
    metrics_.resets_error.Increment();  // a 503, as those the flusher refuses
    return answer(retry_later(v, "shutting down"));
  }
  backend_.reset_counter(
      key, guarded(answer, v, [v, key, answer](const backend_result& r) {
        // Nothing changed: a retry is safe and needed.
        if (r.outcome != backend_result::status::done)
          return answer(retry_later(v, "reset failed: " + r.error, "5"));
        answer(json_response(v, status::ok,
                             "{\"record_type\": " + std::to_string(key.record_type) +
                                 ", \"record_id\": \"" + std::to_string(key.record_id) +
                                 "\", \"cleared\": " + decimal(r.cleared) + "}"));
      }));
}

void router::handle_series(const request& req, const route_match& m, const reply& answer) {
  const unsigned v = req.version();
  auto parsed = counter_of(m, v);
  if (auto* refused = std::get_if<response>(&parsed)) return answer(std::move(*refused));
  const auto [type, id] = std::get<store::counter_key>(parsed);
  const auto bad_request = [&](const std::string& message) {
    answer(error_response(v, status::bad_request, message));
  };
  // granularity, from and to, each exactly once; nothing else.
  std::string_view target = req.target();
  const auto q = target.find('?');
  std::string_view query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  std::optional<std::string_view> gran_text, from_text, to_text;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
    std::optional<std::string_view>* slot = name == "granularity" ? &gran_text
                                            : name == "from"      ? &from_text
                                            : name == "to"        ? &to_text
                                                                  : nullptr;
    if (slot == nullptr)
      return bad_request("unknown query parameter " + json::excerpt(name) +
                         "; expected granularity, from and to");
    if (*slot) return bad_request("query parameter \"" + std::string(name) + "\" given twice");
    *slot = value;
  }
  if (!gran_text || !from_text || !to_text)
    return bad_request(
        "granularity, from and to are required (e.g. ?granularity=day&from="
        "1700000000&to=1702592000, unix seconds)");
  const auto g = store::granularity_named(*gran_text);
  if (!g) return bad_request("granularity must be hour or day");
  std::int64_t from = 0, to = 0;
  if (!parse_decimal(*from_text, from) || from < 0 || from > ingest::max_at ||
      !parse_decimal(*to_text, to) || to < 0 || to > ingest::max_at)
    return bad_request(std::string("from and to must be unix seconds in ") + ingest::at_range);
  if (from > to) return bad_request("from must not be after to");
  const auto* counter = buckets_.find(type);
  if (counter == nullptr || !counter->keeps(*g)) {
    return bad_request("record_type " + std::to_string(type) + " keeps no " +
                       std::string(store::name_of(*g)) + " buckets (counters[].buckets)");
  }
  // The buckets that start in [from, to].
  const std::int64_t step = store::seconds_of(*g);
  const std::int64_t first = store::bucket_start(*g, from) + (from % step == 0 ? 0 : step);
  const std::int64_t last = store::bucket_start(*g, to);
  if (first <= last && (last - first) / step + 1 > max_series_points) {
    return bad_request("the range holds more than " + std::to_string(max_series_points) + " " +
                       std::string(store::name_of(*g)) + " buckets; ask for a shorter one");
  }
  const std::string gran_name(store::name_of(*g));
  if (first > last) {
    return answer(
        json_response(v, status::ok, "{\"granularity\": \"" + gran_name + "\", \"points\": []}"));
  }
  backend_.read_series({type, id}, *g, first, last,
                       guarded(answer, v, [v, gran_name, answer](const backend_result& r) {
                         if (r.outcome != backend_result::status::done)
                           return answer(retry_later(v, r.error, "5"));
                         std::string body =
                             "{\"granularity\": \"" + gran_name + "\", \"points\": [";
                         for (std::size_t i = 0; i < r.points.size(); ++i) {
                           if (i > 0) body += ", ";
                           body += "{\"bucket\": " + std::to_string(r.points[i].first) +
                                   ", \"count\": " + decimal(r.points[i].second) + "}";
                         }
                         body += "]}";
                         answer(json_response(v, status::ok, std::move(body)));
                       }));
}

}  // namespace slotted::http

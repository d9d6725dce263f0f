// libFuzzer harness: a stream of HTTP requests through Beast's parser and the router,
// on one in-memory stream (Beast's test stream, no sockets), the way http::session
// drives them: a fresh request_parser per request with the session's header and body
// limits, the header read first and checked by router::check_header(), then the body,
// then router::handle(); keep-alive requests follow on the same buffer. The backend
// keeps increments in a real pending_store; the database-bound routes answer at once.
//
// Input: one flag byte, then the bytes a client sends. Flag bits 0-2 pick the read size
// (a trickling client: 1, 2, 3, 7, 16, 100, 1000 bytes or all at once), bit 3 a bearer
// token, bit 4 durable (WAL) mode, bit 5 the production limits instead of small ones,
// bit 6 not ready, bit 7 draining.
//
// Checked on every answer: a known status; Content-Length equals the body; a JSON body
// parses; 401 carries WWW-Authenticate, 405 Allow, 503 Retry-After; an increment is
// accepted only with the right token when one is configured; and the increments the
// store holds at the end are exactly those the accepted requests carried.

#include <simdjson.h>

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "http/router.hpp"
#include "http/session.hpp"
#include "store/pending_store.hpp"

namespace beast = boost::beast;
namespace beast_http = boost::beast::http;
using namespace slotted;

namespace {

constexpr std::string_view token = "fuzz-token-0123456789";
constexpr std::size_t max_pending_keys = 64;

[[noreturn]] void fail(const char* what, const http::response* res = nullptr) {
  std::fprintf(stderr, "http_fuzz: invariant broken: %s\n", what);
  if (res) {
    std::fprintf(stderr, "status %u, body: %.*s\n", res->result_int(),
                 static_cast<int>(res->body().size()), res->body().data());
  }
  std::abort();
}

class fuzz_backend : public http::backend {
 public:
  bool draining_ = false;
  bool ready_ = true;
  bool durable_ = false;
  store::pending_store store_{4};
  metrics::registry* metrics_ = nullptr;
  // What the store must hold: every increment of every add() that was applied.
  std::map<store::counter_key, std::int64_t> expected_;
  std::size_t applied_calls_ = 0;

  bool draining() const override { return draining_; }
  bool ready() const override { return ready_; }
  http::backend_result add(std::span<const ingest::increment> increments) {
    const auto r = store_.add(increments, max_pending_keys);
    switch (r) {
      case store::add_result::applied:
        ++applied_calls_;
        for (const auto& inc : increments) expected_[{inc.record_type, inc.record_id}] += inc.delta;
        return {};
      case store::add_result::over_limit:
        return {errc::over_limit};
      case store::add_result::out_of_range:
        return {errc::out_of_range};
    }
    return {errc::unavailable, "fuzz: unknown store result"};
  }
  // Keyed requests count like others here: the fuzzer checks what the router applies.
  // durable_: answered through later()'s callback, as with a WAL.
  void submit(ingest::increment_request& request, const submit_answer& answer) override {
    if (durable_ || request.keyed()) return answer.later()(add(request.increments));
    answer.now(add(request.increments));
  }
  // No key is known here (submit applies every request): the router's own 400.
  void find_keyed(std::string, idempotency::body_hash, std::int64_t, done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    done({});
  }
  void read_counter(store::counter_key key, done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    http::backend_result r;
    r.persisted = 7;
    r.pending = store_.pending(key);
    done(std::move(r));
  }
  void read_counters(std::uint32_t record_type, std::vector<std::uint64_t> record_ids,
                     done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    http::backend_result r;
    for (const auto id : record_ids)
      r.totals.push_back({id, 7, store_.pending({record_type, id})});
    done(std::move(r));
  }
  void read_top(std::uint32_t, std::optional<top_range>, std::size_t limit,
                done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    http::backend_result r;
    for (std::size_t i = 0; i < limit && i < 3; ++i) r.top.emplace_back(i, 3 - i);
    done(std::move(r));
  }
  // The store's pending buckets (none unless the fuzzed config declares buckets).
  void read_series(store::counter_key key, store::granularity g, std::int64_t from, std::int64_t to,
                   done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    std::vector<std::pair<std::int64_t, std::int64_t>> found;
    store_.pending_buckets(key, g, from, to, found);
    http::backend_result r;
    for (const auto& [bucket, count] : found) r.points.emplace_back(bucket, count);
    done(std::move(r));
  }
  // A reset clears the counter in the store and in what it must hold.
  void reset_counter(store::counter_key key, done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    http::backend_result r;
    r.cleared = store_.drop(key);
    expected_.erase(key);
    done(std::move(r));
  }
  void flush_now(done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    done({});
  }
  void rollup_now(done_fn done) override {
    if (!ready_) return done({errc::unavailable, "fuzz: no database"});
    done({});
  }
  std::string metrics_text() override { return metrics_->serialize(); }
};

struct fixture {
  metrics::registry metrics;
  ingest::table_limits limits;
  fuzz_backend backend;
  std::unique_ptr<http::router> open_router;    // no token, undeclared types accepted
  std::unique_ptr<http::router> secure_router;  // a token, declared types only

  fixture() {
    backend.metrics_ = &metrics;
    config::daemon_config cfg;
    cfg.counters = {{"page_views", 1, std::nullopt}, {"likes", 2, std::nullopt}};
    cfg.http.max_items_per_request = 1000;
    cfg.accept_undeclared_types = true;
    open_router = std::make_unique<http::router>(cfg, backend, metrics, limits);
    cfg.accept_undeclared_types = false;
    cfg.http.auth_token = std::string(token);
    secure_router = std::make_unique<http::router>(cfg, backend, metrics, limits);
  }
};

bool has_valid_token(const http::request_header& req) {
  const std::string_view h = req[beast_http::field::authorization];
  if (h.size() != 7 + token.size()) return false;
  return boost::beast::iequals(h.substr(0, 7), "bearer ") && h.substr(7) == token;
}

void check_response(const http::response& res, bool secure, bool token_ok) {
  switch (res.result_int()) {
    case 200:
    case 202:
    case 400:
    case 401:
    case 404:
    case 405:
    case 413:
    case 415:
    case 503:
      break;
    default:
      fail("unexpected status", &res);
  }
  const auto length = res[beast_http::field::content_length];
  if (length != std::to_string(res.body().size()))
    fail("Content-Length differs from the body", &res);
  if (res.result_int() == 401 && res[beast_http::field::www_authenticate].empty())
    fail("401 without WWW-Authenticate", &res);
  if (res.result_int() == 405 && res[beast_http::field::allow].empty())
    fail("405 without Allow", &res);
  if (res.result_int() == 503 && res[beast_http::field::retry_after].empty())
    fail("503 without Retry-After", &res);
  if (res.result_int() == 202 && secure && !token_ok) fail("accepted without the token", &res);
  if (!secure && res.result_int() == 401) fail("401 without a configured token", &res);
  if (res[beast_http::field::content_type] == "application/json") {
    static simdjson::dom::parser json;
    simdjson::dom::element doc;
    if (json.parse(res.body()).get(doc)) fail("a JSON answer that does not parse", &res);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fixture f;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  static constexpr std::size_t read_sizes[] = {1, 2, 3, 7, 16, 100, 1000, SIZE_MAX};
  const bool secure = flags & 0x08;
  f.backend.durable_ = flags & 0x10;
  http::session_limits limits;  // the production defaults
  if (!(flags & 0x20)) {
    limits.max_body_bytes = 600;
    limits.max_header_bytes = 300;
  }
  f.backend.ready_ = !(flags & 0x40);
  f.backend.draining_ = flags & 0x80;
  http::router& router = secure ? *f.secure_router : *f.open_router;

  boost::asio::io_context ioc;
  beast::test::stream stream(ioc,
                             std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  stream.read_size(read_sizes[flags & 7]);
  stream.close_remote();  // the client sends its bytes, then closes

  beast::flat_buffer buffer;
  for (int requests = 0; requests < 64; ++requests) {
    beast_http::request_parser<beast_http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
    parser.body_limit(limits.max_body_bytes);
    beast::error_code ec;
    beast_http::read_header(stream, buffer, parser, ec);
    if (ec) break;  // the session answers 400/413/431 or closes; nothing more is read
    const bool token_ok = has_valid_token(parser.get().base());
    bool keep_alive = parser.get().keep_alive();
    http::router::accepted_route accepted;  // as the session keeps it, per request
    if (auto refused = router.check_header(parser.get().base(), &accepted)) {
      check_response(*refused, secure, token_ok);
      if (!parser.is_done()) break;  // a body left unread: the connection cannot go on
      if (!keep_alive || !refused->keep_alive()) break;
      continue;
    }
    beast_http::read(stream, buffer, parser, ec);
    if (ec) break;
    bool answered = false;
    router.handle(parser.release(), accepted, [&](http::response&& res) {
      if (answered) fail("answered twice");
      answered = true;
      check_response(res, secure, token_ok);
      keep_alive = keep_alive && res.keep_alive();
    });
    if (!answered) fail("no answer (every backend call here answers at once)");
    if (!keep_alive) break;
  }

  // The store holds exactly what the accepted requests carried; then both start over.
  std::vector<store::pending_delta> held;
  f.backend.store_.take_all(held);
  std::map<store::counter_key, std::int64_t> got;
  for (const auto& d : held) got[d.key] += d.delta;
  std::erase_if(f.backend.expected_, [](const auto& kv) { return kv.second == 0; });
  std::erase_if(got, [](const auto& kv) { return kv.second == 0; });
  if (got != f.backend.expected_) fail("the store does not hold what was accepted");
  f.backend.expected_.clear();
  return 0;
}

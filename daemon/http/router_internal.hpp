#pragma once
// What the router's source files share (router.cpp, counter_routes.cpp): the matched
// route, the reply that counts each answer, and how answers are built. Not for other
// folders: include http/router.hpp.

#include <array>
#include <charconv>
#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "http/router.hpp"
#include "util/decimal.hpp"
#include "util/log.hpp"

namespace slotted::http {

namespace detail {

using beast_http::field;
using beast_http::status;
using clock = std::chrono::steady_clock;

// persisted + pending can pass int64: added in 128 bits and printed exactly.
using util::decimal;

inline response json_response(unsigned version, status s, std::string body) {
  response res{s, version};
  res.set(field::content_type, "application/json");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

template <typename Int>
bool parse_decimal(std::string_view s, Int& out) {
  if (s.empty() || s.size() > 20) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Wraps a backend's answer callback, which runs on a database or WAL thread. An
// exception there (memory running out while the answer is built or handed to the
// connection) would escape into that thread and end the process; instead it is logged
// and the request answered 500 (closing its connection) if that still works. The
// session takes only the first answer to a request, so a 500 after an answer that got
// through changes nothing.
template <typename Reply, typename F>
void guarded_call(const Reply& answer, unsigned v, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    log::error("HTTP answer from a backend thread failed: ", e.what());
    try {
      auto res = router::error_response(v, status::internal_server_error, "internal error");
      res.keep_alive(false);
      answer(std::move(res));
    } catch (...) {
    }
  }
}

template <typename Reply, typename F>
auto guarded(const Reply& answer, unsigned v, F f) {
  return [answer, v, f = std::move(f)](auto&&... args) {
    guarded_call(answer, v, [&] { f(std::forward<decltype(args)>(args)...); });
  };
}

}  // namespace detail

struct router::route_match {
  // The row whose path and method match; when only the path does, the path's first row
  // (its route counts the 405); null when no path does.
  const endpoint* row = nullptr;
  bool method_allowed = false;
  // The path's rows, in table order.
  std::span<const endpoint> path_rows;
  // The placeholders' values, in order ({record_type}, {record_id}).
  std::array<std::string_view, 2> params{};

  metrics::route route() const { return row ? row->route : metrics::route::not_found; }
  // The methods the path allows, as the Allow header lists them.
  std::string allow() const {
    std::string methods;
    for (const auto& e : path_rows) {
      if (!methods.empty()) methods += ", ";
      methods += beast_http::to_string(e.method);
      if (e.method == beast_http::verb::get) methods += ", HEAD";
    }
    return methods;
  }
};

// Answers one request: counts it (route, status, time taken) and hands the response on.
// Built on the stack for each request; only the asynchronous routes copy it.
struct router::reply {
  router* self;
  metrics::route route;
  detail::clock::time_point started;
  respond_fn respond;

  void operator()(response&& res) const {
    self->metrics_.observe_request(
        route, res.result_int(),
        std::chrono::duration<double>(detail::clock::now() - started).count());
    respond(std::move(res));
  }
};

}  // namespace slotted::http

// The counter routes: GET and DELETE /v1/counters/{record_type}/{record_id}, and its series
// (README: HTTP API).

#include "http/router.hpp"
#include "http/router_internal.hpp"
#include "util/json.hpp"

namespace slotted::http {

using namespace detail;

std::variant<store::counter_key, response> router::counter_of(const route_match& m, unsigned v) {
  auto parsed = type_of(m.params[0], v);
  if (auto* refused = std::get_if<response>(&parsed)) return std::move(*refused);
  std::uint64_t id = 0;
  if (!parse_decimal(m.params[1], id)) {
    return error_response(
        v, status::bad_request,
        std::string("record_id must be an integer in ") + ingest::record_id_range);
  }
  return store::counter_key{std::get<std::uint32_t>(parsed), id};
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
        if (const auto e = r.failure()) return answer(failure_response(v, e, r.error));
        answer(json_response(v, status::ok,
                             "{\"record_type\": " + std::to_string(type) + ", \"record_id\": \"" +
                                 std::to_string(id) +
                                 "\", \"count\": " + decimal(r.persisted + r.pending) +
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
    return answer(failure_response(v, errc::draining));
  }
  backend_.reset_counter(
      key, guarded(answer, v, [v, key, answer](const backend_result& r) {
        // Nothing changed: a retry is safe and needed.
        if (const auto e = r.failure())
          return answer(failure_response(v, e, "reset failed: " + r.error));
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
                         if (const auto e = r.failure())
                           return answer(failure_response(v, e, r.error));
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

// The counter routes: GET and DELETE /v1/counters/{record_type}/{record_id}, and its series
// (README: HTTP API).

#include "http/query.hpp"
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
  const auto q = parse_query(req.target(), {"granularity", "from", "to"});
  if (!q) return bad_request(q.failed().text());
  const auto gran_text = q->get("granularity"), from_text = q->get("from"), to_text = q->get("to");
  if (!gran_text || !from_text || !to_text)
    return bad_request(
        "granularity, from and to are required (e.g. ?granularity=day&from="
        "1700000000&to=1702592000, unix seconds)");
  const auto range = parse_bucket_range(*gran_text, *from_text, *to_text, max_series_points);
  if (!range) return bad_request(range.failed().text());
  const auto [g, first, last] = *range;
  const auto* counter = buckets_.find(type);
  if (counter == nullptr || !counter->keeps(g)) {
    return bad_request("record_type " + std::to_string(type) + " keeps no " +
                       std::string(store::name_of(g)) + " buckets (counters[].buckets)");
  }
  const std::string gran_name(store::name_of(g));
  if (range->empty()) {
    return answer(
        json_response(v, status::ok, "{\"granularity\": \"" + gran_name + "\", \"points\": []}"));
  }
  backend_.read_series({type, id}, g, first, last,
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

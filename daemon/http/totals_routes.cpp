// The many-counter and top-N routes: GET /v1/counters/{record_type}?ids=... and
// GET /v1/top/{record_type} (README: HTTP API).

#include "http/query.hpp"
#include "http/router.hpp"
#include "http/router_internal.hpp"
#include "model/top_limits.hpp"

namespace slotted::http {

using namespace detail;

std::variant<std::uint32_t, response> router::type_of(std::string_view text, unsigned v) {
  std::uint32_t type = 0;
  const auto live = live_.load();
  if (!parse_decimal(text, type) || type > ingest::max_record_type) {
    const auto named = live->types.by_name(text);
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
  return type;
}

void router::handle_counters_many(const request& req, const route_match& m, const reply& answer) {
  const unsigned v = req.version();
  auto parsed = type_of(m.params[0], v);
  if (auto* refused = std::get_if<response>(&parsed)) return answer(std::move(*refused));
  const auto type = std::get<std::uint32_t>(parsed);
  const auto q = parse_query(req.target(), {"ids"});
  if (!q) return answer(failure_response(v, q.error(), q.failed().text()));
  const auto ids_text = q->get("ids");
  if (!ids_text)
    return answer(error_response(v, status::bad_request,
                                 "query parameter \"ids\" is required (e.g. ?ids=1,2,3)"));
  auto ids = parse_id_list(*ids_text);
  if (!ids) return answer(failure_response(v, ids.error(), ids.failed().text()));
  backend_.read_counters(
      type, std::move(*ids), guarded(answer, v, [v, type, answer](const backend_result& r) {
        if (const auto e = r.failure()) return answer(failure_response(v, e, r.error));
        std::string body = "{\"record_type\": " + std::to_string(type) + ", \"items\": [";
        for (std::size_t i = 0; i < r.totals.size(); ++i) {
          const auto& t = r.totals[i];
          if (i > 0) body += ", ";
          body += "{\"record_id\": \"" + std::to_string(t.record_id) +
                  "\", \"count\": " + decimal(t.persisted + t.pending) +
                  ", \"persisted\": " + decimal(t.persisted) +
                  ", \"pending\": " + std::to_string(t.pending) + "}";
        }
        body += "]}";
        answer(json_response(v, status::ok, std::move(body)));
      }));
}

void router::handle_top(const request& req, const route_match& m, const reply& answer) {
  const unsigned v = req.version();
  auto parsed = type_of(m.params[0], v);
  if (auto* refused = std::get_if<response>(&parsed)) return answer(std::move(*refused));
  const auto type = std::get<std::uint32_t>(parsed);
  // Only a counter declared with `top: true` keeps the totals a top-N reads (db/top.hpp):
  // for any other there is no top-N to read, a 404 naming the switch.
  if (!top_.keeps(type)) {
    return answer(error_response(
        v, status::not_found,
        "record_type " + std::to_string(type) +
            " keeps no top-N totals: declare its counter with top: true (counters[].top), "
            "run slotted-counterd --migrate and restart"));
  }
  const auto bad_request = [&](const std::string& message) {
    answer(error_response(v, status::bad_request, message));
  };
  const auto q = parse_query(req.target(), {"limit", "granularity", "from", "to"});
  if (!q) return bad_request(q.failed().text());
  std::size_t limit = 10;
  if (const auto text = q->get("limit")) {
    if (!parse_decimal(*text, limit) || limit < 1 || limit > max_top_limit)
      return bad_request("limit must be an integer in [1, " + std::to_string(max_top_limit) + "]");
  }
  const auto gran_text = q->get("granularity"), from_text = q->get("from"), to_text = q->get("to");
  std::optional<backend::top_range> range;
  if (gran_text || from_text || to_text) {
    if (!gran_text || !from_text || !to_text)
      return bad_request(
          "granularity, from and to go together (e.g. ?granularity=day&from="
          "1700000000&to=1702592000, unix seconds), or none of them for the totals");
    const auto parsed_range = parse_bucket_range(*gran_text, *from_text, *to_text, max_top_buckets);
    if (!parsed_range) return bad_request(parsed_range.failed().text());
    const auto g = parsed_range->gran;
    const auto* counter = buckets_.find(type);
    if (counter == nullptr || !counter->keeps(g)) {
      return bad_request("record_type " + std::to_string(type) + " keeps no " +
                         std::string(store::name_of(g)) + " buckets (counters[].buckets)");
    }
    if (parsed_range->empty()) return answer(json_response(v, status::ok, "{\"items\": []}"));
    range = backend::top_range{g, parsed_range->first, parsed_range->last};
    // A first round past db::max_top_rows could never be answered, whatever the data: a
    // 400 (not a 503 a client would retry for ever).
    const auto buckets =
        static_cast<std::size_t>((range->to - range->from) / store::seconds_of(range->gran) + 1);
    if (db::top_first_round_rows(buckets, limit) > db::max_top_rows) {
      std::string why = "limit and the range (from, to) together ask too much of one top-N: ";
      why += "with limit ";
      why += std::to_string(limit);
      why += " the range may hold at most ";
      why += std::to_string(db::max_top_rows / db::top_page(limit));
      why += " buckets (it holds ";
      why += std::to_string(buckets);
      why += "); ask for a smaller limit, a shorter range or a coarser granularity";
      return bad_request(why);
    }
  }
  backend_.read_top(type, range, limit, guarded(answer, v, [v, answer](const backend_result& r) {
                      if (const auto e = r.failure())
                        return answer(failure_response(v, e, r.error));
                      std::string body = "{\"items\": [";
                      for (std::size_t i = 0; i < r.top.size(); ++i) {
                        if (i > 0) body += ", ";
                        body += "{\"record_id\": \"" + std::to_string(r.top[i].first) +
                                "\", \"count\": " + decimal(r.top[i].second) + "}";
                      }
                      body += "]}";
                      answer(json_response(v, status::ok, std::move(body)));
                    }));
}

}  // namespace slotted::http

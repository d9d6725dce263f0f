#include "http/query.hpp"

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include "http/router_internal.hpp"
#include "model/increment.hpp"
#include "util/json.hpp"

namespace slotted::http {

result<query_params> parse_query(std::string_view target,
                                 std::initializer_list<std::string_view> names) {
  query_params q;
  const auto mark = target.find('?');
  std::string_view query =
      mark == std::string_view::npos ? std::string_view{} : target.substr(mark + 1);
  std::string expected;
  for (const auto n : names) {
    if (!expected.empty()) expected += ", ";
    expected += n;
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (param.empty()) continue;
    const auto eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return {errc::invalid_input,
              "unknown query parameter " + json::excerpt(name) + "; expected " + expected};
    }
    if (!q.values.emplace(name, value).second) {
      return {errc::invalid_input, "query parameter \"" + std::string(name) + "\" given twice"};
    }
  }
  return q;
}

result<std::vector<std::uint64_t>> parse_id_list(std::string_view ids) {
  std::vector<std::uint64_t> out;
  const auto wrong = [](std::string more = {}) -> failure {
    return {errc::invalid_input, std::string("ids must be 1 to ") +
                                     std::to_string(max_ids_per_read) +
                                     " record ids separated by commas, each an integer in " +
                                     ingest::record_id_range + more};
  };
  if (ids.empty()) return wrong();
  std::unordered_set<std::uint64_t> seen;
  std::size_t given = 0;
  while (true) {
    std::size_t sep = ids.find(',');
    std::size_t skip = 1;
    for (std::size_t i = 0; i + 2 < ids.size() && i < sep; ++i) {
      if (ids[i] == '%' && ids[i + 1] == '2' && (ids[i + 2] == 'C' || ids[i + 2] == 'c')) {
        sep = i;
        skip = 3;
        break;
      }
    }
    const std::string_view one = ids.substr(0, sep);
    std::uint64_t id = 0;
    const auto r = std::from_chars(one.data(), one.data() + one.size(), id);
    if (one.empty() || one.size() > 20 || r.ec != std::errc() || r.ptr != one.data() + one.size())
      return wrong("; " + json::excerpt(one) + " is not");
    if (++given > max_ids_per_read)
      return {errc::invalid_input, "ids lists more than " + std::to_string(max_ids_per_read) +
                                       " record ids; read them in several requests"};
    if (seen.insert(id).second) out.push_back(id);
    if (sep == std::string_view::npos) break;
    ids.remove_prefix(sep + skip);
  }
  return out;
}

result<bucket_range> parse_bucket_range(std::string_view granularity, std::string_view from_text,
                                        std::string_view to_text, std::int64_t max_buckets) {
  const auto bad = [](std::string why) -> failure { return {errc::invalid_input, std::move(why)}; };
  const auto g = store::granularity_named(granularity);
  if (!g) return bad("granularity must be hour or day");
  std::int64_t from = 0, to = 0;
  if (!detail::parse_decimal(from_text, from) || from < 0 || from > ingest::max_at)
    return bad(std::string("from must be unix seconds in ") + ingest::at_range);
  if (!detail::parse_decimal(to_text, to) || to < 0 || to > ingest::max_at)
    return bad(std::string("to must be unix seconds in ") + ingest::at_range);
  if (from > to) return bad("from must not be after to");
  const std::int64_t step = store::seconds_of(*g);
  bucket_range r{*g, store::bucket_start(*g, from) + (from % step == 0 ? 0 : step),
                 store::bucket_start(*g, to)};
  if (!r.empty() && (r.last - r.first) / step + 1 > max_buckets) {
    return bad("the range holds more than " + std::to_string(max_buckets) + " " +
               std::string(store::name_of(*g)) + " buckets; ask for a shorter one");
  }
  return r;
}

}  // namespace slotted::http

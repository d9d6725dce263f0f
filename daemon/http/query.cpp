#include "http/query.hpp"

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include "model/increment.hpp"
#include "util/json.hpp"

namespace slotted::http {

query_params parse_query(std::string_view target, std::initializer_list<std::string_view> names) {
  query_params q;
  const auto mark = target.find('?');
  std::string_view query = mark == std::string_view::npos ? std::string_view{} : target.substr(mark + 1);
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
      q.error = "unknown query parameter " + json::excerpt(name) + "; expected " + expected;
      return q;
    }
    if (!q.values.emplace(name, value).second) {
      q.error = "query parameter \"" + std::string(name) + "\" given twice";
      return q;
    }
  }
  return q;
}

std::optional<std::string> parse_id_list(std::string_view ids, std::vector<std::uint64_t>& out) {
  out.clear();
  const auto wrong = [] {
    return std::string("ids must be 1 to ") + std::to_string(max_ids_per_read) +
           " record ids separated by commas, each an integer in " + ingest::record_id_range;
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
      return wrong() + "; " + json::excerpt(one) + " is not";
    if (++given > max_ids_per_read)
      return "ids lists more than " + std::to_string(max_ids_per_read) +
             " record ids; read them in several requests";
    if (seen.insert(id).second) out.push_back(id);
    if (sep == std::string_view::npos) break;
    ids.remove_prefix(sep + skip);
  }
  return std::nullopt;
}

}  // namespace slotted::http

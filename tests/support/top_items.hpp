#pragma once
// The items of a top-N answer (GET /v1/top/{type}), in order: (record_id, count).

#include <cstdint>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace slotted::test {

using ranking = std::vector<std::pair<std::uint64_t, std::int64_t>>;

inline ranking items_of(const std::string& body) {
  ranking out;
  static const std::regex item(R"re(\{"record_id": "(\d+)", "count": (-?\d+)\})re");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), item); it != std::sregex_iterator();
       ++it)
    out.emplace_back(std::stoull((*it)[1]), std::stoll((*it)[2]));
  return out;
}

}  // namespace slotted::test

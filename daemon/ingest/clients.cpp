#include "ingest/clients.hpp"

#include <string>

namespace slotted::ingest {

namespace {
parse_error refused(std::size_t i, std::string why) {
  why += "; nothing of this request was applied";
  return parse_error{400, std::move(why), i};
}
}  // namespace

std::optional<parse_error> check_clients(std::span<increment> increments,
                                         const store::dedupe_spec& dedupe, std::int64_t now) {
  for (std::size_t i = 0; i < increments.size(); ++i) {
    auto& inc = increments[i];
    if (inc.client.empty()) continue;
    const auto g = dedupe.window_of(inc.record_type);
    if (g == store::granularity::none) {
      std::string why = "\"client\" is only accepted for a counter with dedupe (record_type ";
      why += std::to_string(inc.record_type);
      why += " has none)";
      return refused(i, std::move(why));
    }
    if (inc.delta != 1) {
      std::string why = "an item with \"client\" must have a delta of 1, got ";
      why += std::to_string(inc.delta);
      return refused(i, std::move(why));
    }
    if (!inc.at_given) inc.at = now;
    if (!dedupe.accepts(inc.record_type, store::bucket_start(g, inc.at), now)) {
      std::string why = "\"at\" ";
      why += std::to_string(inc.at);
      why += " lies in a dedupe window that ended more than ";
      why += std::to_string(dedupe.keep_of(inc.record_type));
      why += " s (counters[].dedupe_keep) before now (";
      why += std::to_string(now);
      why += "): its decisions are no longer kept";
      return refused(i, std::move(why));
    }
    if (inc.at > now + max_at_ahead_seconds) {
      std::string why = "\"at\" ";
      why += std::to_string(inc.at);
      why += " is more than ";
      why += std::to_string(max_at_ahead_seconds);
      why += " s in the future (now ";
      why += std::to_string(now);
      why += ")";
      return refused(i, std::move(why));
    }
  }
  return std::nullopt;
}

bool has_clients(std::span<const increment> increments) {
  for (const auto& inc : increments)
    if (!inc.client.empty()) return true;
  return false;
}

store::unique_entry unique_entry_of(const increment& inc, const store::dedupe_spec& dedupe) {
  const auto g = dedupe.window_of(inc.record_type);
  return store::unique_entry{inc.record_type, inc.record_id, store::bucket_start(g, inc.at),
                             inc.client, inc.at};
}

split_items split_clients(std::span<const increment> increments, const store::dedupe_spec& dedupe) {
  split_items out;
  for (const auto& inc : increments) {
    if (inc.client.empty()) {
      out.plain.push_back(inc);  // no client: nothing on the heap to copy
    } else {
      out.entries.push_back(unique_entry_of(inc, dedupe));
    }
  }
  return out;
}

}  // namespace slotted::ingest

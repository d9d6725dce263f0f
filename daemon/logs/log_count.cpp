// The line counter of the log reader (source_state.hpp): one line parsed, matched
// against every rule of its source and tallied into the pass's totals and buckets.

#include <chrono>

#include "logs/source_state.hpp"
#include "util/log.hpp"

namespace slotted::logs {

line_counter::line_counter(source_state& s, const ingest_settings& settings, pass_counts& pass)
    : s_(s),
      settings_(settings),
      pass_(pass),
      now_s_(std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count()) {}

void line_counter::count(std::string_view text, std::uint64_t at_offset) {
  if (!parsed(text, at_offset)) return;
  if (!match_rules(at_offset)) return;
  add_matches();
}

// The line parsed with a time accepted; else it is malformed (the first ones logged).
bool line_counter::parsed(std::string_view text, std::uint64_t at_offset) {
  const bool ok = s_.cfg.format == config::log_format::combined
                      ? parse_combined(text, line_)
                      : parse_json(text, s_.cfg.json, line_, scratch_);
  if (ok && line_time_accepted(line_.at, now_s_)) return true;
  ++pass_.tally[malformed];
  if (at_offset >= s_.examined && s_.logged_malformed < 5) {
    ++s_.logged_malformed;
    log::warn("log_sources: ", s_.cfg.path, ": a line at offset ", at_offset,
              " does not parse as ",
              s_.cfg.format == config::log_format::combined ? "combined" : "json",
              "; skipped (slotted_counterd_log_lines_total{outcome=\"malformed\"})");
  }
  return false;
}

// Every rule first: a line a pattern gives up on counts for none of them.
bool line_counter::match_rules(std::uint64_t at_offset) {
  matched_.clear();
  for (const auto& rule : s_.rules) {
    bool failed = false;
    const auto id = rule.match(line_, settings_.max_record_id, &failed);
    if (failed) {
      ++pass_.tally[rule_error];
      if (at_offset >= s_.examined && s_.logged_malformed < 5) {
        ++s_.logged_malformed;
        log::warn("log_sources: ", s_.cfg.path,
                  ": a rule's pattern gives up on the line at offset ", at_offset,
                  " (regex complexity limit); skipped ",
                  "(slotted_counterd_log_lines_total{outcome=\"rule_error\"})");
      }
      return false;
    }
    if (id) matched_.emplace_back(&rule, *id);
  }
  return true;
}

// A match of a counter with `dedupe` and a line with a client: an entry of the pass
// (counted as its pass commits, when no batch counted it before). False when the line's
// window ended more than the margin ago: that window's decisions may be pruned already
// (db/uniques.hpp), so it cannot be counted at most once and is not counted.
bool line_counter::add_unique(std::uint32_t record_type, std::uint64_t id, store::granularity g) {
  const std::int64_t window = store::bucket_start(g, line_.at);
  if (!store::window_decidable(g, window, now_s_)) return false;
  store::unique_entry e{record_type, id, window, std::string(line_.client), line_.at};
  pass_.uniques.insert(std::move(e));
  return true;
}

// The matches into the totals and the buckets the line's time is still kept for, or,
// for a counter with `dedupe`, into the entries of the pass.
void line_counter::add_matches() {
  bool any = false, old = false, late = false;
  for (const auto& [rule_p, id] : matched_) {
    const auto& rule = *rule_p;
    any = true;
    const auto window = settings_.dedupe.window_of(rule.record_type());
    // A client longer than the uniques table holds is no address: no client.
    if (window != store::granularity::none && !line_.client.empty() &&
        line_.client.size() <= store::max_client_bytes) {
      if (!add_unique(rule.record_type(), id, window)) late = true;
      continue;
    }
    const store::counter_key key{rule.record_type(), id};
    ++pass_.totals[key];
    if (const auto* b = settings_.buckets.find(rule.record_type())) {
      for (const auto g : store::all_granularities) {
        if (!b->keeps(g)) continue;
        if (line_.at < now_s_ - b->retention[static_cast<int>(g)].count()) {
          old = true;
          continue;
        }
        ++pass_.buckets[{key.record_type, key.record_id, g, store::bucket_start(g, line_.at)}];
      }
    }
  }
  ++pass_.tally[!any   ? not_matched
                : late ? too_late_for_dedupe
                : old  ? too_old_for_buckets
                       : counted];
}

}  // namespace slotted::logs

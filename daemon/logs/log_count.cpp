// The line counter of the log reader (source_state.hpp): one line parsed, matched
// against the rules of its source in order and tallied, for the first rule that
// matches, into the pass's totals and buckets.

#include <algorithm>
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
                 .count()),
      user_agent_(std::any_of(s.rules.begin(), s.rules.end(),
                              [](const compiled_rule& r) { return r.wants_user_agent(); })) {
  for (std::size_t i = 0; i < s.rules.size(); ++i)
    same_as_before_.push_back(i > 0 && s.rules[i].same_request_test(s.rules[i - 1]));
}

// Rules are tried in order; the first that matches counts the line (docs/configuration.md,
// Counting from access logs). RE2 never gives up on a line, so none is a rule_error any
// more (the outcome stays in the metric, at 0).
void line_counter::count(std::string_view text, std::uint64_t at_offset) {
  if (!parsed(text, at_offset)) return;
  std::optional<std::uint64_t> id;
  for (std::size_t i = 0; i < s_.rules.size(); ++i) {
    const auto& rule = s_.rules[i];
    // A rule testing the request as the one before it: its result again.
    if (!same_as_before_[i]) id = rule.match_request(line_, settings_.max_record_id);
    if (id && rule.match_agent(line_)) {
      add_match(rule, *id);
      return;
    }
  }
  ++pass_.tally[not_matched];
}

// The line parsed with a time accepted; else it is malformed (the first ones logged).
bool line_counter::parsed(std::string_view text, std::uint64_t at_offset) {
  const bool ok = s_.cfg.format == config::log_format::combined
                      ? parse_combined(text, line_, user_agent_)
                      : parse_json(text, s_.cfg.json, line_, scratch_);
  if (ok && line_time_accepted(line_.at, now_s_)) return true;
  ++pass_.tally[malformed];
  if (at_offset >= s_.examined && s_.logged_malformed < 5) {
    ++s_.logged_malformed;
    log::warn("log_sources: ", s_.cfg.path, ": a line at offset ", at_offset, " does not parse as ",
              s_.cfg.format == config::log_format::combined ? "combined" : "json",
              "; skipped (slotted_counterd_log_lines_total{outcome=\"malformed\"})");
  }
  return false;
}

// A match of a counter with `dedupe` and a line with a client: an entry of the pass
// (counted as its pass commits, when no batch counted it before). False when the line's
// window ended more than the counter's keep ago (counters[].dedupe_keep): that window's
// decisions may be pruned, so it cannot be counted at most once and is not counted.
bool line_counter::add_unique(std::uint32_t record_type, std::uint64_t id, store::granularity g) {
  const std::int64_t window = store::bucket_start(g, line_.at);
  if (!settings_.dedupe.accepts(record_type, window, now_s_)) return false;
  store::unique_entry e{record_type, id, window, std::string(line_.client), line_.at};
  pass_.uniques.insert(std::move(e));
  return true;
}

// The match into the totals and the buckets the line's time is still kept for, or, for
// a counter with `dedupe`, into the entries of the pass.
void line_counter::add_match(const compiled_rule& rule, std::uint64_t id) {
  const auto window = settings_.dedupe.window_of(rule.record_type());
  // A client longer than the uniques table holds is no address: no client.
  if (window != store::granularity::none && !line_.client.empty() &&
      line_.client.size() <= store::max_client_bytes) {
    ++pass_.tally[add_unique(rule.record_type(), id, window) ? counted : too_late_for_dedupe];
    return;
  }
  const store::counter_key key{rule.record_type(), id};
  ++pass_.totals[key];
  bool old = false;
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
  ++pass_.tally[old ? too_old_for_buckets : counted];
}

}  // namespace slotted::logs

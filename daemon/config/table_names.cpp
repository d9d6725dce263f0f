// mysql.table against MariaDB's 64-character identifier limit: every table the daemon
// derives from it (its bucket tables, its totals tables, and the scratch tables --migrate
// builds them under, which are never longer than the table they become) must fit, so
// the bound is the limit less the longest suffix the config makes use of. A feature that
// adds a derived table adds its suffix to derived_suffixes, and nothing else.
#include <string>
#include <string_view>
#include <vector>

#include "config/checker.hpp"
#include "config/config.hpp"

namespace slotted::config::detail {
namespace {

constexpr std::size_t identifier_limit = 64;

// The suffixes of the tables this config makes, each with the keys that make it.
struct derived {
  std::string_view suffix;
  std::string_view because;
};

std::vector<derived> derived_suffixes(const daemon_config& cfg) {
  std::vector<derived> out;
  const auto buckets = bucket_spec_of(cfg);
  const auto top = top_spec_of(cfg);
  using store::granularity;
  if (buckets.uses(granularity::hour)) out.push_back({"_hour", "counters[].buckets"});
  if (buckets.uses(granularity::day)) out.push_back({"_day", "counters[].buckets"});
  if (!top.empty()) out.push_back({"_totals", "counters[].top"});
  if (top.uses(granularity::hour))
    out.push_back({"_hour_totals", "counters[].top with hour buckets"});
  if (top.uses(granularity::day)) out.push_back({"_day_totals", "counters[].top with day buckets"});
  if (!dedupe_spec_of(cfg).empty()) out.push_back({"_uniques", "counters[].dedupe"});
  return out;
}

}  // namespace

void check_table_name_length(const daemon_config& cfg, checker& c) {
  const auto all = derived_suffixes(cfg);
  const derived* longest = nullptr;
  for (const auto& d : all) {
    if (longest == nullptr || d.suffix.size() > longest->suffix.size()) longest = &d;
  }
  if (longest == nullptr) return;  // no derived table: is_valid_identifier's 64 holds
  const std::size_t most = identifier_limit - longest->suffix.size();
  if (cfg.mysql.table.size() <= most) return;
  std::string names;
  for (const auto& d : all) {
    if (!names.empty()) names += ", ";
    names += "`<table>";
    names += d.suffix;
    names += "`";
  }
  std::string msg = "may have at most ";
  msg += std::to_string(most);
  msg += " characters with this config (it has ";
  msg += std::to_string(cfg.mysql.table.size());
  msg += "): the tables derived from it (";
  msg += names;
  msg += ") must fit MariaDB's 64-character identifiers, the longest being `<table>";
  msg += longest->suffix;
  msg += "` (";
  msg += longest->because;
  msg += ")";
  c.fail_plain("mysql.table", msg);
}

}  // namespace slotted::config::detail

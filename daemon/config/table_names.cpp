// mysql.table against MariaDB's 64-character identifier limit: every table the daemon
// derives from it (its bucket tables, its totals tables, and the scratch tables --migrate
// builds them under, which are never longer than the table they become) must fit, so
// the bound is the limit less the longest suffix the config makes use of. A feature that
// adds a derived table adds its suffix to derived_suffixes, and nothing else.
// postgresql.table against PostgreSQL's 63 bytes, which its index names must fit too
// (`<table>_hour_by_age`: db/dialect_postgresql.cpp names an index `<table>_<index>`, and
// refuses at --migrate a name it would truncate).
#include <string>
#include <string_view>
#include <vector>

#include "config/checker.hpp"
#include "config/config.hpp"

namespace slotted::config::detail {
namespace {

constexpr std::size_t identifier_limit = 64;
constexpr std::size_t postgresql_identifier_limit = 63;

// The suffixes of the tables this config makes, each with the keys that make it, and
// the suffix of the longest of its index names on PostgreSQL (db/: the table's table_def).
struct derived {
  std::string_view suffix;
  std::string_view because;
  std::string_view index = {};
};

std::vector<derived> derived_suffixes(const daemon_config& cfg) {
  std::vector<derived> out;
  const auto buckets = bucket_spec_of(cfg);
  const auto top = top_spec_of(cfg);
  using store::granularity;
  if (buckets.uses(granularity::hour)) out.push_back({"_hour", "counters[].buckets", "_by_age"});
  if (buckets.uses(granularity::day)) out.push_back({"_day", "counters[].buckets", "_by_age"});
  if (!top.empty()) out.push_back({"_totals", "counters[].top", "_by_count"});
  if (top.uses(granularity::hour))
    out.push_back({"_hour_totals", "counters[].top with hour buckets", "_by_count"});
  if (top.uses(granularity::day))
    out.push_back({"_day_totals", "counters[].top with day buckets", "_by_count"});
  if (!dedupe_spec_of(cfg).empty()) out.push_back({"_uniques", "counters[].dedupe"});
  return out;
}

}  // namespace

void check_table_name_length(const daemon_config& cfg, checker& c) {
  const bool postgresql = cfg.mysql.engine == database_engine::postgresql;
  const auto length = [postgresql](const derived& d) {
    return d.suffix.size() + (postgresql ? d.index.size() : 0);
  };
  auto all = derived_suffixes(cfg);
  if (postgresql) all.push_back({"", "postgresql"});
  const derived* longest = nullptr;
  for (const auto& d : all) {
    if (longest == nullptr || length(d) > length(*longest)) longest = &d;
  }
  if (longest == nullptr) return;  // no derived table: is_valid_identifier's 64 holds
  const std::size_t most =
      (postgresql ? postgresql_identifier_limit : identifier_limit) - length(*longest);
  if (postgresql && cfg.mysql.schema.size() > postgresql_identifier_limit)
    c.fail_plain("postgresql.schema", "may have at most 63 characters (PostgreSQL's names)");
  if (cfg.mysql.table.size() <= most) return;
  std::string names;
  for (const auto& d : all) {
    if (d.suffix.empty()) continue;
    if (!names.empty()) names += ", ";
    names += "`<table>";
    names += d.suffix;
    names += "`";
  }
  std::string msg = "may have at most ";
  msg += std::to_string(most);
  msg += " characters with this config (it has ";
  msg += std::to_string(cfg.mysql.table.size());
  msg += ")";
  if (!postgresql) {
    msg += ": the tables derived from it (";
    msg += names;
    msg += ") must fit MariaDB's 64-character identifiers, the longest being `<table>";
    msg += longest->suffix;
    msg += "` (";
    msg += longest->because;
    msg += ")";
  } else if (longest->suffix.empty()) {
    msg += ": PostgreSQL's names have at most 63 bytes";
  } else {
    msg += ": the tables derived from it (";
    msg += names;
    msg += ") and their indexes must fit PostgreSQL's 63-byte names, the longest being `<table>";
    msg += longest->suffix;
    msg += longest->index;
    msg += "` (";
    msg += longest->because;
    msg += ")";
  }
  c.fail_plain(cfg.mysql.key("table"), msg);
}

}  // namespace slotted::config::detail

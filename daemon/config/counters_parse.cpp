// counters: the declared counters, their rollup targets and their buckets.

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "config/checker.hpp"
#include "model/increment.hpp"

namespace slotted::config::detail {
namespace {

// counters[i].rollup: all three keys or none.
void parse_rollup_target(checker& c, const YAML::Node& a, const std::string& ap,
                         std::optional<rollup_target>& out) {
  rollup_target t;
  int present = 0;
  const auto column = [&](std::string& field) {
    return [&c, &field, &present](const YAML::Node& b, const std::string& bp) {
      c.identifier(b, bp, field);
      ++present;
    };
  };
  c.mapping(a, ap,
            {
                {"table", column(t.table)},
                {"id_column", column(t.id_column)},
                {"count_column", column(t.count_column)},
            });
  if (present != 3) c.fail(a, ap, "needs table, id_column and count_column");
  out = t;
}

// counters[i].buckets: {hour: RETENTION, day: RETENTION}, at least one of them.
void parse_buckets(checker& c, const YAML::Node& a, const std::string& ap,
                   std::vector<bucket_decl>& out) {
  if (!a.IsMap() || a.size() == 0) {
    c.fail(
        a, ap,
        "expected a mapping of granularity (hour, day) to retention, e.g. {hour: 48h, day: 400d}");
    return;
  }
  std::vector<bucket_decl> found;
  for (const auto& entry : a) {
    const std::string key = entry.first.as<std::string>("");
    const std::string kp = ap + "." + key;
    const auto g = store::granularity_named(key);
    if (!g) {
      c.fail(entry.first, kp, "unknown granularity '" + key + "'; expected hour or day");
      continue;
    }
    std::string text;
    if (entry.second.IsScalar()) text = entry.second.Scalar();
    const auto d = parse_duration(text);
    if (!d) {
      c.fail(entry.second, kp,
             "expected a retention like 48h or 400d (a positive duration), got '" + text + "'");
      continue;
    }
    // A bucket's row is written before it can be pruned, so a retention below a second
    // would only churn; 100 years is far past any use and far inside every range.
    if (*d < std::chrono::seconds(1) || *d > std::chrono::hours(24) * 36500) {
      c.fail(entry.second, kp, "retention must be between 1s and 36500d, got '" + text + "'");
      continue;
    }
    found.push_back({*g, *d});
  }
  std::sort(found.begin(), found.end(), [](const bucket_decl& x, const bucket_decl& y) {
    return x.granularity < y.granularity;
  });
  out = std::move(found);
}

}  // namespace

// counters: a list of {name, record_type[, rollup][, buckets][, top][, dedupe]}, names and types
// each unique.
void parse_counters(checker& c, const YAML::Node& v, const std::string& p,
                    std::vector<counter_decl>& counters) {
  if (!c.list(v, p, "expected a list of counters")) return;
  std::set<std::string> names;
  std::set<std::uint32_t> types;
  // One owning column per counter: two counters rolled up into one column would each
  // adopt its history and overwrite each other's totals (docs/adopting.md).
  std::map<std::string, std::string> owning_columns;  // "table.column" -> counter name
  for (std::size_t i = 0; i < v.size(); ++i) {
    const YAML::Node item = v[i];
    const std::string ip = p + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) {
      c.fail(item, ip, "expected a mapping with name and record_type");
      continue;
    }
    counter_decl d;
    bool has_name = false, has_type = false, has_keep = false;
    c.mapping(
        item, ip,
        {
            {"name",
             [&](auto& a, auto& ap) {
               c.identifier(a, ap, d.name);
               has_name = true;
             }},
            {"record_type",
             [&](auto& a, auto& ap) {
               c.integer<std::uint32_t>(a, ap, 0, ingest::max_record_type, d.record_type);
               has_type = true;
             }},
            {"rollup", [&](auto& a, auto& ap) { parse_rollup_target(c, a, ap, d.rollup); }},
            {"buckets", [&](auto& a, auto& ap) { parse_buckets(c, a, ap, d.buckets); }},
            {"top", [&](auto& a, auto& ap) { c.boolean(a, ap, d.top); }},
            {"dedupe",
             [&](auto& a, auto& ap) {
               c.choice<store::granularity>(
                   a, ap, {{"hour", store::granularity::hour}, {"day", store::granularity::day}},
                   d.dedupe);
             }},
            {"dedupe_keep",
             [&](auto& a, auto& ap) {
               has_keep = true;
               c.time_span(a, ap, std::chrono::seconds(store::min_dedupe_keep_seconds),
                           std::chrono::seconds(store::max_dedupe_keep_seconds), d.dedupe_keep);
             }},
        });
    if (has_keep && d.dedupe == store::granularity::none)
      c.fail(item, ip + ".dedupe_keep", "only with counters[].dedupe");
    if (!has_name) c.fail(item, ip + ".name", "missing");
    if (!has_type) c.fail(item, ip + ".record_type", "missing");
    if (has_name && !d.name.empty() && !names.insert(d.name).second) {
      c.fail(item, ip + ".name", "'" + d.name + "' is declared twice");
    }
    if (has_type && !types.insert(d.record_type).second) {
      c.fail(item, ip + ".record_type", std::to_string(d.record_type) + " is declared twice");
    }
    if (d.rollup) {
      std::string column = d.rollup->count_column;
      std::transform(column.begin(), column.end(), column.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      const auto [it, fresh] = owning_columns.emplace(d.rollup->table + "." + column, d.name);
      if (!fresh) {
        c.fail(item, ip + ".rollup",
               "`" + d.rollup->table + "`.`" + d.rollup->count_column +
                   "` is already the rollup target of counter '" + it->second +
                   "': one owning column holds one counter");
      }
    }
    counters.push_back(std::move(d));
  }
}

}  // namespace slotted::config::detail

namespace slotted::config {

store::dedupe_spec dedupe_spec_of(const daemon_config& cfg) {
  store::dedupe_spec spec;
  for (const auto& c : cfg.counters) {
    if (c.dedupe != store::granularity::none) {
      spec.declare(c.record_type, c.dedupe,
                   std::chrono::duration_cast<std::chrono::seconds>(c.dedupe_keep).count());
    }
  }
  return spec;
}

store::top_spec top_spec_of(const daemon_config& cfg) {
  std::vector<std::uint32_t> types;
  for (const auto& c : cfg.counters) {
    if (c.top) types.push_back(c.record_type);
  }
  return store::top_spec(std::move(types), bucket_spec_of(cfg));
}

}  // namespace slotted::config

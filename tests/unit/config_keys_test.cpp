// The config's key table (daemon/config/config_keys.cpp) drives the parser, the reload
// plan and the reload's apply step: a key cannot be parsed without a row, nor changed
// without the plan naming it.

#include <gtest/gtest.h>

#include <stdexcept>

#include "config/config.hpp"
#include "config/config_keys.hpp"
#include "config/yaml_walk.hpp"

namespace slotted::config {
namespace {

daemon_config base() {
  return parse_config("counters: [{name: pages, record_type: 7}]\n", "base.yaml");
}

const std::vector<std::string>& list_of(const reload_plan& plan, reload_kind kind) {
  return kind == reload_kind::live ? plan.live : plan.needs_restart;
}

// Generated from the table: a config differing in any one key is planned, under that
// key's name, in the list of its reload kind, and nothing else is.
TEST(ConfigKeys, AChangeOfAnyKeyIsPlannedAndNothingElse) {
  int changed = 0;
  for (const auto& row : config_keys()) {
    if (row.differs == nullptr) continue;
    ASSERT_NE(row.change, nullptr) << row.key;
    auto next = base();
    row.change(row, next);
    const auto plan = plan_reload(base(), next);
    const auto other = row.reload == reload_kind::live ? reload_kind::restart : reload_kind::live;
    EXPECT_EQ(list_of(plan, row.reload), std::vector<std::string>{std::string(plan_name(row))})
        << row.key;
    EXPECT_TRUE(list_of(plan, other).empty()) << row.key;
    ++changed;
  }
  EXPECT_GT(changed, 40);
}

// Every key is compared by its own row or by the row of the key that holds it.
TEST(ConfigKeys, EveryKeyIsComparedByARow) {
  for (const auto& row : config_keys()) {
    if (row.reload == reload_kind::refused) continue;
    if (row.differs == nullptr) {
      const key_row* whole = find_key(plan_name(row));
      ASSERT_NE(whole, nullptr) << row.key << " is planned as " << plan_name(row);
      EXPECT_NE(whole->differs, nullptr) << row.key;
    }
    if (row.parse == nullptr) {
      // A part of a structured key (counters[].name): the key that holds it is parsed
      // by its row.
      const key_row* top = find_key(row.key.substr(0, row.key.find("[]")));
      ASSERT_NE(top, nullptr) << row.key;
      EXPECT_NE(top->parse, nullptr) << row.key;
    }
  }
}

// The reload applies exactly the live keys: after adopt_live nothing live is left to
// apply, and every restart key still differs.
TEST(ConfigKeys, AReloadAdoptsTheLiveKeysAndOnlyThem) {
  for (const auto& row : config_keys()) {
    if (row.differs == nullptr) continue;
    auto running = base();
    auto next = base();
    row.change(row, next);
    adopt_live(running, next);
    const auto plan = plan_reload(running, next);
    EXPECT_TRUE(plan.live.empty()) << row.key;
    if (row.reload == reload_kind::restart) {
      EXPECT_EQ(plan.needs_restart, std::vector<std::string>{std::string(plan_name(row))})
          << row.key;
    } else {
      EXPECT_EQ(row.reload, reload_kind::live) << row.key;
      EXPECT_NE(row.adopt, nullptr) << row.key;
    }
  }
}

// A config naming every section and every structured key's parts parses: each mapping
// the parser walks has a row for each key it accepts (walk_mapping checks).
TEST(ConfigKeys, EveryKeyTheParserAcceptsHasARow) {
  const auto cfg = parse_config(
      "instance_id: a\n"
      "listen: {address: 127.0.0.1, port: 1, unix_socket: /run/a.sock, unix_socket_mode: 0600}\n"
      "http: {threads: 1, max_body_bytes: 100, max_items_per_request: 1, idle_timeout: 1s,\n"
      "       max_connections: 1, auth_token_file: /t}\n"
      "mysql: {host: h, port: 1, user: u, password_env: PW, database: d, table: t,\n"
      "        connect_timeout: 1s, pool_size: 3, hosts: [\"a:1\"], tls: {mode: required}}\n"
      "counters:\n"
      "  - name: pages\n"
      "    record_type: 7\n"
      "    rollup: {table: t, id_column: id, count_column: n}\n"
      "    buckets: {hour: 1h, day: 2d}\n"
      "accept_undeclared_types: true\n"
      "shards: 2\n"
      "flush: {interval: 1s, max_rows_per_statement: 1, slots: 1, max_pending_keys: 1,\n"
      "        max_retry_backoff: 1s, connections: 2}\n"
      "rollup: {interval: 1s, batch_size: 1}\n"
      "wal: {dir: /w, fsync: interval, fsync_interval: 5ms}\n"
      "idempotency: {window: 1h, max_keys: 1}\n"
      "shutdown_timeout: 1s\n"
      "log: {level: debug}\n"
      "log_sources:\n"
      "  - path: /var/log/a.log\n"
      "    format: json\n"
      "    json: {time: t, method: m, path: p, status: s}\n"
      "    rules: [{counter: pages, path: '/p/([0-9]+)', methods: [GET], statuses: [200]}]\n",
      "every.yaml", {}, false);
  EXPECT_EQ(cfg.log_sources.size(), 1u);
  EXPECT_EQ(cfg.mysql.tls.mode, tls_mode::required);

  // A handler for a key the table lacks is refused at once, whatever the text holds.
  const yaml_fail ignore = [](const YAML::Node&, const std::string&, const std::string&) {};
  const key_handlers known{{"name", [](const YAML::Node&, const std::string&) {}}};
  EXPECT_NO_THROW(walk_mapping(YAML::Load("{}"), "counters[3]", known, ignore,
                               null_mapping::empty));
  const key_handlers unknown{{"colour", [](const YAML::Node&, const std::string&) {}}};
  EXPECT_THROW(walk_mapping(YAML::Load("{}"), "counters[3]", unknown, ignore,
                            null_mapping::empty),
               std::logic_error);
}

TEST(ConfigKeys, AKeyWithoutARowIsUnknown) {
  try {
    parse_config("flush: {slots: 2, colour: red}\n", "t.yaml");
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.problems(), std::vector<std::string>{"t.yaml:1: flush.colour: unknown key"});
  }
}

}  // namespace
}  // namespace slotted::config

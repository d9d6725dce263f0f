#include "db/repository.hpp"

#include <mysqld_error.h>

#include <algorithm>
#include <map>
#include <vector>

#include "db/errors.hpp"

namespace slotted::db {

void migrate(connection& conn, const std::string& table) {
  conn.execute(create_counters_table(table));
  conn.execute(create_ledger_table());
}

void verify_schema(connection& conn, const std::string& table) {
  const std::string quoted = conn.quote(table);
  const auto columns = conn.query(
      "SELECT LOWER(COLUMN_NAME) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
      "AND TABLE_NAME = " + quoted);
  if (columns.empty()) {
    throw db_error(0, "table `" + table + "` does not exist in the configured database; run "
                      "slotted-counterd --migrate", true);
  }
  for (const char* needed : {"record_type", "record_id", "slot", "count"}) {
    const bool found = std::any_of(columns.begin(), columns.end(),
                                   [&](const result_row& r) { return r[0] && *r[0] == needed; });
    if (!found) {
      throw db_error(0, "table `" + table + "` has no column `" + needed + "`", true);
    }
  }
  const auto index_rows = conn.query(
      "SELECT INDEX_NAME, LOWER(COLUMN_NAME) FROM information_schema.STATISTICS WHERE "
      "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = " + quoted +
      " AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX");
  std::map<std::string, std::vector<std::string>> unique_indexes;
  for (const auto& r : index_rows) unique_indexes[r[0].value_or("")].push_back(r[1].value_or(""));
  const std::vector<std::string> wanted{"record_type", "record_id", "slot"};
  const bool has_key = std::any_of(unique_indexes.begin(), unique_indexes.end(),
                                   [&](const auto& entry) { return entry.second == wanted; });
  if (!has_key) {
    throw db_error(0, "table `" + table + "` needs a PRIMARY or UNIQUE key on exactly "
                      "(record_type, record_id, slot) for ON DUPLICATE KEY UPDATE", true);
  }
  const auto ledger = conn.query(
      "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" +
      std::string(ledger_table) + "'");
  if (ledger.empty()) {
    throw db_error(0, "table `" + std::string(ledger_table) +
                      "` does not exist; run slotted-counterd --migrate", true);
  }
}

commit_outcome commit_batch(connection& conn, const std::string& table, const batch_identity& id,
                            std::span<const counter_row> rows) {
  conn.execute("START TRANSACTION");
  try {
    try {
      conn.execute(ledger_insert(conn.quote(id.instance_id), id.run_id, id.seq, rows.size()));
    } catch (const db_error& e) {
      if (e.code() != ER_DUP_ENTRY) throw;
      conn.execute("ROLLBACK");
      return commit_outcome::already_applied;
    }
    conn.execute(upsert_statement(table, rows));
    conn.execute("COMMIT");
    return commit_outcome::applied;
  } catch (const db_error& e) {
    if (!e.connection_lost()) {
      try {
        conn.execute("ROLLBACK");
      } catch (const db_error&) {
        // The original error is the one worth reporting.
      }
    }
    throw;
  }
}

std::uint64_t prune_ledger(connection& conn, const batch_identity& keep_from,
                           std::uint64_t max_age_seconds) {
  conn.execute(ledger_prune(conn.quote(keep_from.instance_id), keep_from.run_id, keep_from.seq,
                            max_age_seconds, 10000));
  return conn.affected_rows();
}

std::int64_t read_count(connection& conn, const std::string& table, std::uint32_t record_type,
                        std::uint64_t record_id) {
  const auto rows = conn.query(select_count(table, record_type, record_id));
  if (rows.empty() || !rows[0][0]) return 0;
  return std::stoll(*rows[0][0]);
}

}  // namespace slotted::db

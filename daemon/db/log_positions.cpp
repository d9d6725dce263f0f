#include "db/log_positions.hpp"

#include <mysqld_error.h>

#include <algorithm>

#include "db/repository.hpp"
#include "db/sql_text.hpp"
#include "db/top.hpp"
#include "model/errors.hpp"

namespace slotted::logs {

std::uint64_t head_hash(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {
std::string table() {
  return db::quote_identifier(positions_table);
}
std::string key_where(std::string_view instance, std::string_view path) {
  return " WHERE `instance_id` = " + std::string(instance) + " AND `path` = " + std::string(path);
}
}  // namespace

std::string create_positions_table() {
  return db::sql_text::create_table(
      table(),
      "  `instance_id` VARCHAR(64) NOT NULL,\n"
      "  `path` VARBINARY(512) NOT NULL,\n"
      "  `file_dev` BIGINT UNSIGNED NOT NULL,\n"
      "  `file_ino` BIGINT UNSIGNED NOT NULL,\n"
      "  `head_len` INT UNSIGNED NOT NULL,\n"
      "  `head_hash` BIGINT UNSIGNED NOT NULL,\n"
      "  `offset` BIGINT UNSIGNED NOT NULL,\n"
      "  `committed_at` TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n"
      "  PRIMARY KEY (`instance_id`, `path`)\n");
}

std::string position_select(std::string_view instance, std::string_view path, bool for_update) {
  return "SELECT `file_dev`, `file_ino`, `head_len`, `head_hash`, `offset` FROM " + table() +
         key_where(instance, path) + (for_update ? " FOR UPDATE" : "");
}

std::string position_insert(std::string_view instance, std::string_view path,
                            const log_position& p) {
  return "INSERT INTO " + table() +
         " (`instance_id`, `path`, `file_dev`, `file_ino`, `head_len`, `head_hash`, `offset`) "
         "VALUES (" +
         std::string(instance) + ", " + std::string(path) + ", " + std::to_string(p.file.dev) +
         ", " + std::to_string(p.file.ino) + ", " + std::to_string(p.file.head_len) + ", " +
         std::to_string(p.file.head_hash) + ", " + std::to_string(p.offset) + ")";
}

std::string position_update(std::string_view instance, std::string_view path,
                            const log_position& p) {
  return "UPDATE " + table() + " SET `file_dev` = " + std::to_string(p.file.dev) +
         ", `file_ino` = " + std::to_string(p.file.ino) +
         ", `head_len` = " + std::to_string(p.file.head_len) +
         ", `head_hash` = " + std::to_string(p.file.head_hash) +
         ", `offset` = " + std::to_string(p.offset) + ", `committed_at` = CURRENT_TIMESTAMP(3)" +
         key_where(instance, path);
}

namespace {
std::optional<log_position> position_of(const std::vector<db::result_row>& rows) {
  if (rows.empty()) return std::nullopt;
  const auto& r = rows[0];
  const auto num = [&](std::size_t i) { return std::stoull(r[i].value_or("0")); };
  log_position p;
  p.file.dev = num(0);
  p.file.ino = num(1);
  p.file.head_len = static_cast<std::uint32_t>(num(2));
  p.file.head_hash = num(3);
  p.offset = num(4);
  return p;
}

void roll_back(db::connection& conn, const db::db_error& e) {
  if (e.connection_lost()) return;
  try {
    conn.execute(db::rollback);
  } catch (const db::db_error&) {
  }
}
}  // namespace

void verify_positions_table(db::connection& conn) {
  if (conn.query(db::table_exists_select(conn.quote(positions_table))).empty()) {
    throw db::db_error(0,
                       "table `" + std::string(positions_table) +
                           "` does not exist but log_sources needs it; run slotted-counterd "
                           "--migrate",
                       true);
  }
}

std::optional<log_position> read_position(db::connection& conn, std::string_view instance,
                                          std::string_view path) {
  return position_of(conn.query(position_select(conn.quote(instance), conn.quote(path), false)));
}

log_commit commit_log_batch(db::connection& conn, const std::string& counters_table,
                            const log_batch& b) {
  const std::string instance = conn.quote(b.instance_id);
  const std::string path = conn.quote(b.path);
  conn.execute(db::start_transaction);
  try {
    // 1. The position row, locked: the compare of the compare-and-set.
    const auto now = position_of(conn.query(position_select(instance, path, true)));
    if (now != b.from) {
      conn.execute(db::rollback);
      return log_commit::conflict;
    }
    if (now) {
      conn.execute(position_update(instance, path, b.to));
    } else {
      try {
        conn.execute(position_insert(instance, path, b.to));
      } catch (const db::db_error& e) {
        // Another writer inserted it first (no row to lock before).
        if (e.code() != ER_DUP_ENTRY) throw;
        conn.execute(db::rollback);
        return log_commit::conflict;
      }
    }
    // 3. Slot rows, sorted; 4. bucket rows; 5. totals; 6. dirty marks.
    const std::size_t per = std::max<std::size_t>(1, b.max_rows_per_statement);
    for (std::size_t i = 0; i < b.rows.size(); i += per)
      conn.execute(db::upsert_statement(counters_table,
                                        b.rows.subspan(i, std::min(per, b.rows.size() - i))));
    db::upsert_buckets(conn, counters_table, b.buckets,
                       std::clamp<std::size_t>(conn.max_statement_bytes() / 256, 1, 1000));
    // 5. The totals of top-N of the counters that keep them (db/top.hpp).
    for (const auto& sql : db::totals_upserts(counters_table, b.rows, b.buckets,
                                              b.top ? *b.top : store::no_top(),
                                              conn.max_statement_bytes()))
      conn.execute(sql);
    if (!b.dirty.empty()) conn.execute(db::dirty_upsert(instance, b.dirty, b.dirty_gen));
    conn.execute(db::commit);
    return log_commit::applied;
  } catch (const db::db_error& e) {
    roll_back(conn, e);
    throw;
  }
}

}  // namespace slotted::logs

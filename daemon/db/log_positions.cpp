#include "db/log_positions.hpp"

#include <algorithm>
#include <vector>

#include "db/errors.hpp"
#include "db/repository.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

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

std::string create_positions_table(const dialect& d) {
  return d.create_table(
      {std::string(positions_table),
       {{"`instance_id`", column_type::text64},
        {"`path`", column_type::bytes512},
        {"`file_dev`", column_type::u64},
        {"`file_ino`", column_type::u64},
        {"`head_len`", column_type::u32},
        {"`head_hash`", column_type::u64},
        {"`offset`", column_type::u64},
        {"`in_long_line`", column_type::u8, false, "0"},
        {"`file_mtime_ns`", column_type::i64, false, "0"},
        {"`committed_at`", column_type::moment_ms, false, "CURRENT_TIMESTAMP(3)"}},
       "`instance_id`, `path`"});
}

std::string position_select(std::string_view instance, std::string_view path, bool for_update) {
  return "SELECT `file_dev`, `file_ino`, `head_len`, `head_hash`, `offset`, `in_long_line`, "
         "`file_mtime_ns` FROM " +
         table() + key_where(instance, path) + (for_update ? " FOR UPDATE" : "");
}

std::string position_insert(const dialect& d, std::string_view instance, std::string_view path,
                            const log_position& p) {
  return "INSERT INTO " + table() +
         " (`instance_id`, `path`, `file_dev`, `file_ino`, `head_len`, `head_hash`, `offset`, "
         "`in_long_line`, `file_mtime_ns`) VALUES (" +
         std::string(instance) + ", " + std::string(path) + ", " + d.u64_bits(p.file.dev) + ", " +
         d.u64_bits(p.file.ino) + ", " + std::to_string(p.file.head_len) + ", " +
         d.u64_bits(p.file.head_hash) + ", " + std::to_string(p.offset) + ", " +
         (p.in_long_line ? "1" : "0") + ", " + std::to_string(p.file_mtime_ns) + ")";
}

std::string positions_move_statement(std::string_view from, std::string_view to) {
  return "UPDATE " + std::string(positions_table) + " SET instance_id = '" + std::string(to) +
         "' WHERE instance_id = '" + std::string(from) + "'";
}

std::string position_update(const dialect& d, std::string_view instance, std::string_view path,
                            const log_position& p) {
  return "UPDATE " + table() + " SET `file_dev` = " + d.u64_bits(p.file.dev) +
         ", `file_ino` = " + d.u64_bits(p.file.ino) +
         ", `head_len` = " + std::to_string(p.file.head_len) +
         ", `head_hash` = " + d.u64_bits(p.file.head_hash) +
         ", `offset` = " + std::to_string(p.offset) +
         ", `in_long_line` = " + (p.in_long_line ? "1" : "0") +
         ", `file_mtime_ns` = " + std::to_string(p.file_mtime_ns) +
         ", `committed_at` = CURRENT_TIMESTAMP(3)" + key_where(instance, path);
}

namespace {
// The position in the columns of `r` from `at` on (position_select's order).
log_position position_in(const db::result_row& r, std::size_t at) {
  const auto num = [&](std::size_t i) { return std::stoull(r[at + i].value_or("0")); };
  log_position p;
  p.file.dev = num(0);
  p.file.ino = num(1);
  p.file.head_len = static_cast<std::uint32_t>(num(2));
  p.file.head_hash = num(3);
  p.offset = num(4);
  p.in_long_line = num(5) != 0;
  p.file_mtime_ns = std::stoll(r[at + 6].value_or("0"));
  return p;
}

std::optional<log_position> position_of(const std::vector<db::result_row>& rows) {
  if (rows.empty()) return std::nullopt;
  return position_in(rows[0], 0);
}

// The columns a positions table of this version has that earlier ones lacked, with
// their definitions.
constexpr std::pair<const char*, const char*> added_columns[] = {
    {"in_long_line", "TINYINT UNSIGNED NOT NULL DEFAULT 0 AFTER `offset`"},
    {"file_mtime_ns", "BIGINT NOT NULL DEFAULT 0 AFTER `in_long_line`"},
};

std::vector<std::string> column_names(db::connection& conn) {
  std::vector<std::string> names;
  for (const auto& r : conn.query(conn.sql().columns_select(conn.quote(positions_table))))
    names.push_back(r[0].value_or(""));
  return names;
}

}  // namespace

std::vector<std::string> positions_table_upgrade(const std::vector<std::string>& columns) {
  std::string adds;
  for (const auto& [name, definition] : added_columns) {
    if (std::find(columns.begin(), columns.end(), name) != columns.end()) continue;
    adds += std::string(adds.empty() ? " ADD COLUMN " : ", ADD COLUMN ") +
            db::quote_identifier(name) + " " + definition;
  }
  if (adds.empty()) return {};
  return {"ALTER TABLE " + table() + adds};
}

void migrate_positions_table(db::connection& conn) {
  conn.execute(create_positions_table(conn.sql()));
  for (const auto& sql : positions_table_upgrade(column_names(conn))) conn.execute(sql);
}

void verify_positions_table(db::connection& conn) {
  if (!table_exists(conn, positions_table)) {
    throw db::db_error(db::error_class::fatal,
                       "table `" + std::string(positions_table) +
                           "` does not exist but log_sources needs it; run slotted-counterd "
                           "--migrate");
  }
  if (!positions_table_upgrade(column_names(conn)).empty()) {
    throw db::db_error(db::error_class::fatal,
                       "table `" + std::string(positions_table) +
                           "` was made by an earlier version (it lacks in_long_line or "
                           "file_mtime_ns); run slotted-counterd --migrate");
  }
}

std::optional<log_position> read_position(db::connection& conn, std::string_view instance,
                                          std::string_view path) {
  return position_of(
      conn.query(position_select(conn.quote(instance), conn.quote_bytes(path), false)));
}

std::vector<other_position> positions_of_others(db::connection& conn, std::string_view instance,
                                                std::string_view path,
                                                std::span<const file_inode> files) {
  std::string named = "`path` = " + conn.quote_bytes(path);
  if (!files.empty()) {
    named += " OR (`file_dev`, `file_ino`) IN (";
    for (std::size_t i = 0; i < files.size(); ++i) {
      named += (i ? ",(" : "(") + conn.sql().u64_bits(files[i].dev) + "," +
               conn.sql().u64_bits(files[i].ino) + ")";
    }
    named += ")";
  }
  std::vector<other_position> out;
  for (const auto& r : conn.query(
           "SELECT `instance_id`, `file_dev`, `file_ino`, `head_len`, `head_hash`, `offset`, "
           "`in_long_line`, `file_mtime_ns` FROM " +
           table() + " WHERE (" + named + ") AND `instance_id` <> " + conn.quote(instance) +
           " ORDER BY `instance_id`"))
    out.push_back({r[0].value_or(""), position_in(r, 1)});
  return out;
}

bool claim_position(db::connection& conn, std::string_view instance_id, std::string_view path,
                    const std::optional<log_position>& from, const log_position& to) {
  const std::string instance = conn.quote(instance_id);
  const std::string quoted_path = conn.quote_bytes(path);
  // The row, locked: the compare of the compare-and-set.
  if (position_of(conn.query(position_select(instance, quoted_path, true))) != from) {
    conn.execute(db::rollback);
    return false;
  }
  if (from) {
    conn.execute(position_update(conn.sql(), instance, quoted_path, to));
    return true;
  }
  try {
    conn.execute(position_insert(conn.sql(), instance, quoted_path, to));
  } catch (const db::db_error& e) {
    // Another writer inserted it first (no row to lock before).
    if (!e.duplicate_key()) throw;
    conn.execute(db::rollback);
    return false;
  }
  return true;
}

}  // namespace slotted::db

#include "db/sql.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <type_traits>

namespace slotted::db {

namespace {
template <typename Int>
void append_int(std::string& out, Int value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}
// Appends "(a,b,...)": the values of an IN list.
template <typename Ints>
void append_int_list(std::string& out, const Ints& values) {
  out.push_back('(');
  bool first = true;
  for (const auto v : values) {
    if (!first) out.push_back(',');
    first = false;
    append_int(out, v);
  }
  out.push_back(')');
}
// Appends "a,b,...": integers as numbers, anything else (a quoted string, a bucket
// literal) as it is.
template <typename... Values>
void append_values(std::string& out, const Values&... values) {
  bool first = true;
  const auto one = [&](const auto& v) {
    if (!first) out.push_back(',');
    first = false;
    if constexpr (std::is_integral_v<std::remove_cvref_t<decltype(v)>>) {
      append_int(out, v);
    } else {
      out += v;
    }
  };
  (one(values), ...);
}
// Appends "(a,b,...),(...)" with one tuple per row, written by `tuple`.
template <typename Row, typename Tuple>
void append_tuples(std::string& sql, std::span<const Row> rows, Tuple tuple) {
  bool first = true;
  for (const auto& r : rows) {
    if (!first) sql.push_back(',');
    first = false;
    sql.push_back('(');
    tuple(r);
    sql.push_back(')');
  }
}
}  // namespace

std::string quote_identifier(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out.push_back('`');
  for (char c : name) {
    if (c == '`') out.push_back('`');  // unreachable for valid identifiers; defence in depth
    out.push_back(c);
  }
  out.push_back('`');
  return out;
}

namespace {
constexpr std::string_view in_table = " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ";
}  // namespace

std::string table_exists_select(std::string_view quoted_table) {
  return std::string("SELECT 1 FROM information_schema.TABLES")
      .append(in_table)
      .append(quoted_table);
}

std::string columns_select(std::string_view quoted_table) {
  return std::string(
             "SELECT LOWER(COLUMN_NAME), LOWER(DATA_TYPE), LOWER(COLUMN_TYPE) FROM "
             "information_schema.COLUMNS")
      .append(in_table)
      .append(quoted_table);
}

std::string unique_index_columns_select(std::string_view quoted_table) {
  return std::string("SELECT INDEX_NAME, LOWER(COLUMN_NAME) FROM information_schema.STATISTICS")
      .append(in_table)
      .append(quoted_table)
      .append(" AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX");
}

std::string column_exists_select(std::string_view quoted_table, std::string_view quoted_column) {
  return std::string("SELECT 1 FROM information_schema.COLUMNS")
      .append(in_table)
      .append(quoted_table)
      .append(" AND COLUMN_NAME = ")
      .append(quoted_column);
}

std::string index_exists_select(std::string_view quoted_table, std::string_view quoted_index) {
  return std::string("SELECT 1 FROM information_schema.STATISTICS")
      .append(in_table)
      .append(quoted_table)
      .append(" AND INDEX_NAME = ")
      .append(quoted_index)
      .append(" LIMIT 1");
}

std::string autoincrement_column_select(std::string_view quoted_table) {
  return std::string(
             "SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE) FROM "
             "information_schema.COLUMNS")
      .append(in_table)
      .append(quoted_table)
      .append(" AND EXTRA LIKE '%auto_increment%'");
}

std::string autoincrement_next_select(std::string_view quoted_table) {
  return std::string(
             "SELECT AUTO_INCREMENT, @@SESSION.auto_increment_increment FROM "
             "information_schema.TABLES")
      .append(in_table)
      .append(quoted_table);
}

std::string ledger_seqs_select(std::string_view quoted_instance, std::uint64_t run_id,
                               std::uint64_t min_seq) {
  std::string sql =
      "SELECT `batch_seq` FROM " + quote_identifier(ledger_table) + " WHERE `instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += " AND `batch_seq` >= ";
  append_int(sql, min_seq);
  return sql;
}

std::string upsert_statement(std::string_view table, std::span<const counter_row> rows) {
  std::string sql;
  sql.reserve(128 + rows.size() * 40);
  sql += "INSERT INTO ";
  sql += quote_identifier(table);
  sql += " (`record_type`, `record_id`, `slot`, `count`) VALUES ";
  append_tuples(sql, rows, [&](const counter_row& r) {
    append_values(sql, r.record_type, r.record_id, r.slot, r.delta);
  });
  sql += " ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)";
  return sql;
}

std::string create_counters_table(std::string_view table) {
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(table) +
         " (\n"
         "  `record_type` INT UNSIGNED NOT NULL,\n"
         "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
         "  `slot` SMALLINT UNSIGNED NOT NULL,\n"
         "  `count` BIGINT NOT NULL,\n"
         "  PRIMARY KEY (`record_type`, `record_id`, `slot`)\n"
         ") ENGINE=InnoDB";
}

std::string create_ledger_table() {
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(ledger_table) +
         " (\n"
         "  `instance_id` VARCHAR(64) NOT NULL,\n"
         "  `run_id` BIGINT UNSIGNED NOT NULL,\n"
         "  `batch_seq` BIGINT UNSIGNED NOT NULL,\n"
         "  `row_count` INT UNSIGNED NOT NULL,\n"
         "  `committed_at` TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n"
         "  PRIMARY KEY (`instance_id`, `run_id`, `batch_seq`),\n"
         "  KEY `by_age` (`instance_id`, `committed_at`),\n"
         // Every instance's old rows (an instance that never comes back leaves its own).
         "  KEY `by_time` (`committed_at`)\n"
         ") ENGINE=InnoDB";
}

std::string ledger_add_time_index() {
  return "ALTER TABLE " + quote_identifier(ledger_table) + " ADD KEY " +
         quote_identifier(ledger_time_index) + " (`committed_at`)";
}

std::string ledger_insert(std::string_view quoted_instance, std::uint64_t run_id,
                          std::uint64_t batch_seq, std::size_t rows) {
  std::string sql = "INSERT INTO " + quote_identifier(ledger_table) +
                    " (`instance_id`, `run_id`, `batch_seq`, `row_count`) VALUES (";
  append_values(sql, quoted_instance, run_id, batch_seq, rows);
  sql.push_back(')');
  return sql;
}

std::string ledger_prune_select(std::string_view quoted_instance, std::uint64_t run_id,
                                std::uint64_t keep_from_seq, std::uint64_t max_age_seconds,
                                std::size_t limit) {
  std::string sql = "SELECT `instance_id`, `run_id`, `batch_seq` FROM " +
                    quote_identifier(ledger_table) + " WHERE `instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += " AND `batch_seq` < ";
  append_int(sql, keep_from_seq);
  sql += " AND `committed_at` < NOW(3) - INTERVAL ";
  append_int(sql, max_age_seconds);
  sql += " SECOND ORDER BY `committed_at` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string ledger_stale_select(std::string_view quoted_instance, std::uint64_t run_id,
                                std::uint64_t max_age_seconds, std::size_t limit) {
  std::string sql = "SELECT `instance_id`, `run_id`, `batch_seq` FROM " +
                    quote_identifier(ledger_table) + " WHERE `committed_at` < NOW(3) - INTERVAL ";
  append_int(sql, max_age_seconds);
  sql += " SECOND AND NOT (`instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += ") ORDER BY `committed_at` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string ledger_delete(std::string_view quoted_instance, std::uint64_t run_id,
                          std::span<const std::uint64_t> seqs, std::uint64_t max_age_seconds) {
  // The multi-table form, for its index hint: without it the optimizer may scan the
  // table for a long IN list and wait on (and lock) rows it does not delete.
  const std::string t = quote_identifier(ledger_table);
  std::string sql = "DELETE " + t + " FROM " + t + " FORCE INDEX (PRIMARY) WHERE `instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += " AND `batch_seq` IN ";
  append_int_list(sql, seqs);
  sql += " AND `committed_at` < NOW(3) - INTERVAL ";
  append_int(sql, max_age_seconds);
  sql += " SECOND";
  return sql;
}

std::string create_dirty_table() {
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(dirty_table) +
         " (\n"
         "  `record_type` INT UNSIGNED NOT NULL,\n"
         "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
         "  `instance_id` VARCHAR(64) NOT NULL,\n"
         "  `gen` BIGINT UNSIGNED NOT NULL,\n"
         "  PRIMARY KEY (`record_type`, `record_id`, `instance_id`)\n"
         ") ENGINE=InnoDB";
}

std::string create_adoptions_table() {
  // Identifiers are ASCII (config::is_valid_identifier) and compared as MariaDB compares
  // table names on Linux: case-sensitively.
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(adoptions_table) +
         " (\n"
         "  `record_type` INT UNSIGNED NOT NULL,\n"
         "  `owner_table` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
         "  `count_column` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
         "  `id_column` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
         "  `state` ENUM('running', 'done') NOT NULL,\n"
         "  `mode` ENUM('history', 'no_history', 'zeros') NOT NULL,\n"
         "  `last_id` BIGINT UNSIGNED NULL,\n"
         "  `rows_taken` BIGINT UNSIGNED NOT NULL DEFAULT 0,\n"
         "  `total_taken` DECIMAL(65, 0) NOT NULL DEFAULT 0,\n"
         "  `started` DATETIME NOT NULL,\n"
         "  `finished` DATETIME NULL,\n"
         "  PRIMARY KEY (`record_type`, `owner_table`, `count_column`)\n"
         ") ENGINE=InnoDB";
}

std::string dirty_upsert(std::string_view quoted_instance, std::span<const counter_row> rows,
                         std::uint64_t gen) {
  std::string sql = "INSERT INTO " + quote_identifier(dirty_table) +
                    " (`record_type`, `record_id`, `instance_id`, `gen`) VALUES ";
  sql.reserve(sql.size() + rows.size() * (32 + quoted_instance.size()));
  append_tuples(sql, rows, [&](const counter_row& r) {
    append_values(sql, r.record_type, r.record_id, quoted_instance, gen);
  });
  sql += " ON DUPLICATE KEY UPDATE `gen` = VALUES(`gen`)";
  return sql;
}

std::string dirty_select(std::uint32_t record_type, std::size_t limit, const dirty_cursor& cursor) {
  std::string sql = "SELECT `record_id`, `instance_id`, `gen` FROM " +
                    quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` <= ";
  append_int(sql, cursor.max_record_id);
  if (cursor.started) {
    sql += " AND (`record_id` > ";
    append_int(sql, cursor.last_record_id);
    sql += " OR (`record_id` = ";
    append_int(sql, cursor.last_record_id);
    sql += " AND `instance_id` > " + cursor.last_quoted_instance + "))";
  }
  sql += " ORDER BY `record_id`, `instance_id` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string dirty_max_record_id(std::uint32_t record_type) {
  std::string sql =
      "SELECT MAX(`record_id`) FROM " + quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  return sql;
}

std::string dirty_delete(std::uint32_t record_type, std::span<const dirty_mark> marks) {
  std::string sql = "DELETE FROM " + quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND (`record_id`, `instance_id`, `gen`) IN (";
  append_tuples(sql, marks, [&](const dirty_mark& m) {
    append_values(sql, m.record_id, m.quoted_instance, m.gen);
  });
  sql.push_back(')');
  return sql;
}

namespace {
void append_id_list(std::string& sql, std::span<const std::uint64_t> ids) {
  bool first = true;
  for (const auto id : ids) {
    if (!first) sql.push_back(',');
    first = false;
    append_int(sql, id);
  }
}
}  // namespace

std::string rollup_update(std::string_view counters_table, std::uint32_t record_type,
                          std::string_view owner_table, std::string_view id_column,
                          std::string_view count_column, std::span<const std::uint64_t> ids) {
  // A LEFT JOIN: a marked counter without slot rows (reset) is set to 0, not skipped.
  std::string sql = "UPDATE " + quote_identifier(owner_table) +
                    " AS o LEFT JOIN (SELECT `record_id`, SUM(`count`) AS total FROM " +
                    quote_identifier(counters_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` IN (";
  append_id_list(sql, ids);
  sql += ") GROUP BY `record_id`) AS s ON o." + quote_identifier(id_column) +
         " = s.`record_id` SET o." + quote_identifier(count_column) +
         " = COALESCE(s.total, 0) WHERE o." + quote_identifier(id_column) + " IN (";
  append_id_list(sql, ids);
  sql.push_back(')');
  return sql;
}

std::string owner_ids_select(std::string_view owner_table, std::string_view id_column,
                             std::span<const std::uint64_t> ids) {
  std::string sql = "SELECT " + quote_identifier(id_column) + " FROM " +
                    quote_identifier(owner_table) + " WHERE " + quote_identifier(id_column) +
                    " IN (";
  append_id_list(sql, ids);
  sql.push_back(')');
  return sql;
}

std::string select_count(std::string_view table, std::uint32_t record_type,
                         std::uint64_t record_id) {
  // SUM is DECIMAL and printed exactly: a CAST AS SIGNED would cap a total past
  // 2^63 - 1 silently (read into 128 bits, see db::read_count).
  std::string sql = "SELECT COALESCE(SUM(`count`), 0) FROM " +
                    quote_identifier(table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
  return sql;
}

namespace {
// " WHERE `record_type` = T AND `record_id` = I"
void append_counter_key(std::string& sql, std::uint32_t record_type, std::uint64_t record_id) {
  sql += " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
}
}  // namespace

std::string reset_rows_select_locked(std::string_view table, std::uint32_t record_type,
                                     std::uint64_t record_id) {
  std::string sql = "SELECT `slot`, `count` FROM " + quote_identifier(table);
  append_counter_key(sql, record_type, record_id);
  sql += " FOR UPDATE";
  return sql;
}

std::vector<std::string> reset_statements(std::string_view table, std::uint32_t record_type,
                                          std::uint64_t record_id,
                                          std::span<const std::int64_t> slots,
                                          std::string_view quoted_instance,
                                          std::optional<std::uint64_t> dirty_gen,
                                          std::span<const store::granularity> bucket_grans) {
  // In the writers' lock order (repository.hpp, "Lock order"): slot rows, bucket rows,
  // dirty mark.
  std::vector<std::string> out;
  if (!slots.empty()) {
    std::string sql = "DELETE FROM " + quote_identifier(table);
    append_counter_key(sql, record_type, record_id);
    sql += " AND `slot` IN ";
    append_int_list(sql, slots);
    out.push_back(std::move(sql));
    for (const auto g : bucket_grans) {
      // The bucket rows of exactly the slots read (and locked): a slot another
      // instance inserts meanwhile keeps its buckets with its total.
      std::string b = "DELETE FROM " + quote_identifier(bucket_table(table, g));
      append_counter_key(b, record_type, record_id);
      b += " AND `slot` IN ";
      append_int_list(b, slots);
      out.push_back(std::move(b));
    }
  }
  if (dirty_gen) {
    const counter_row row{record_type, record_id, 0, 0};
    out.push_back(dirty_upsert(quoted_instance, std::span(&row, 1), *dirty_gen));
  }
  return out;
}

std::string create_idempotency_keys_table() {
  // idem_key is binary: keys are compared byte for byte ("a" and "A" are two keys).
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(idempotency_keys_table) +
         " (\n"
         "  `idem_key` VARBINARY(128) NOT NULL,\n"
         "  `body_hash` CHAR(32) CHARACTER SET ascii NOT NULL,\n"
         "  `accepted` INT UNSIGNED NOT NULL,\n"
         "  `instance_id` VARCHAR(64) NOT NULL,\n"
         "  `run_id` BIGINT UNSIGNED NOT NULL,\n"
         "  `batch_seq` BIGINT UNSIGNED NOT NULL,\n"
         // When the first request with the key arrived: unix milliseconds by the
         // database's clock (see sql.hpp).
         "  `created_ms` BIGINT NOT NULL,\n"
         "  PRIMARY KEY (`idem_key`),\n"
         "  KEY `by_age` (`created_ms`)\n"
         ") ENGINE=InnoDB";
}

std::vector<std::string> idempotency_keys_upgrade(bool has_created_ms, bool has_by_age) {
  const std::string t = quote_identifier(idempotency_keys_table);
  std::vector<std::string> out;
  if (!has_created_ms)
    out.push_back("ALTER TABLE " + t +
                  " ADD COLUMN `created_ms` BIGINT NOT NULL DEFAULT 0 AFTER `batch_seq`");
  // The TIMESTAMP's seconds since the epoch, whatever the session's time_zone.
  out.push_back("UPDATE " + t + " SET `created_ms` = ROUND(UNIX_TIMESTAMP(`created`) * 1000)");
  out.push_back("ALTER TABLE " + t + (has_by_age ? " DROP KEY `by_age`," : "") +
                " DROP COLUMN `created`, ALTER COLUMN `created_ms` DROP DEFAULT, "
                "ADD KEY `by_age` (`created_ms`)");
  return out;
}

std::string database_now_ms() {
  return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)";
}

namespace {
// The database's clock, unix milliseconds, less `age_ms`: when something `age_ms` old
// happened.
std::string database_ms_ago(std::int64_t age_ms) {
  return database_now_ms() + " - " + std::to_string(std::max<std::int64_t>(0, age_ms));
}
}  // namespace

std::string idempotency_keys_claim(std::span<const idempotency::keyed_request> requests,
                                   std::span<const std::string> quoted_keys,
                                   std::string_view quoted_instance, std::uint64_t run_id,
                                   std::uint64_t batch_seq, std::chrono::milliseconds window,
                                   std::int64_t local_now_ms) {
  const std::string batch_id =
      std::string(quoted_instance) + "," + std::to_string(run_id) + "," + std::to_string(batch_seq);
  std::string out = "INSERT INTO " + quote_identifier(idempotency_keys_table) +
                    " (`idem_key`, `body_hash`, `accepted`, `instance_id`, `run_id`, "
                    "`batch_seq`, `created_ms`) VALUES ";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (i > 0) out.push_back(',');
    out += "(" + quoted_keys[i] + ",'" + idempotency::hex(r.hash) + "'," +
           std::to_string(r.increments.size()) + "," + batch_id + "," +
           database_ms_ago(r.received_ms > 0 ? local_now_ms - r.received_ms : 0) + ")";
  }
  // `created_ms` is assigned last, so every IF sees the row's old value; VALUES() is
  // the arriving request's.
  const std::string expired =
      "`created_ms` < VALUES(`created_ms`) - " + std::to_string(window.count());
  const auto take = [&](const char* column) {
    return std::string("`") + column + "` = IF(" + expired + ", VALUES(`" + column + "`), `" +
           column + "`)";
  };
  out += " ON DUPLICATE KEY UPDATE " + take("body_hash") + ", " + take("accepted") + ", " +
         take("instance_id") + ", " + take("run_id") + ", " + take("batch_seq") + ", " +
         take("created_ms");
  return out;
}

std::string idempotency_keys_select_locked(std::span<const std::string> quoted_keys) {
  std::string out = "SELECT `idem_key`, `body_hash`, `instance_id`, `run_id`, `batch_seq` FROM " +
                    quote_identifier(idempotency_keys_table) + " WHERE `idem_key` IN (";
  for (std::size_t i = 0; i < quoted_keys.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += quoted_keys[i];
  }
  return out + ") LOCK IN SHARE MODE";
}

std::string idempotency_keys_find(std::string_view quoted_key, std::int64_t age_ms,
                                  std::chrono::milliseconds window) {
  // The claim's test for a row to take over, negated, for an arrival `age_ms` ago.
  return "SELECT `body_hash`, `accepted` FROM " + quote_identifier(idempotency_keys_table) +
         " WHERE `idem_key` = " + std::string(quoted_key) + " AND `created_ms` >= " +
         database_ms_ago(age_ms) + " - " + std::to_string(window.count());
}

std::string idempotency_keys_prune_select(std::chrono::milliseconds age, std::size_t limit) {
  return "SELECT `idem_key` FROM " + quote_identifier(idempotency_keys_table) +
         " WHERE `created_ms` < " + database_ms_ago(age.count()) +
         " ORDER BY `created_ms` LIMIT " + std::to_string(limit);
}

std::string idempotency_keys_delete(std::span<const std::string> quoted_keys,
                                    std::chrono::milliseconds age) {
  // The multi-table form, for its index hint (see ledger_delete).
  const std::string t = quote_identifier(idempotency_keys_table);
  std::string out = "DELETE " + t + " FROM " + t + " FORCE INDEX (PRIMARY) WHERE `idem_key` IN (";
  for (std::size_t i = 0; i < quoted_keys.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += quoted_keys[i];
  }
  return out + ") AND `created_ms` < " + database_ms_ago(age.count());
}

std::string bucket_table(std::string_view table, store::granularity g) {
  return std::string(table) + "_" + std::string(store::name_of(g));
}

std::string bucket_literal(store::granularity g, std::int64_t start) {
  // Civil date of a day count (H. Hinnant's days_from_civil, inverted): no time zone,
  // no locale, no libc state.
  const std::int64_t days = start / 86400, secs = start % 86400;
  const std::int64_t z = days + 719468;
  const std::int64_t era = z / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const std::int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  char buf[128];  // room for any int64 fields, though a valid time needs 21
  if (g == store::granularity::day) {
    std::snprintf(buf, sizeof buf, "'%04lld-%02lld-%02lld'", static_cast<long long>(y),
                  static_cast<long long>(m), static_cast<long long>(d));
  } else {
    std::snprintf(buf, sizeof buf, "'%04lld-%02lld-%02lld %02lld:%02lld:%02lld'",
                  static_cast<long long>(y), static_cast<long long>(m), static_cast<long long>(d),
                  static_cast<long long>(secs / 3600), static_cast<long long>(secs / 60 % 60),
                  static_cast<long long>(secs % 60));
  }
  return buf;
}

std::string create_bucket_table(std::string_view table, store::granularity g) {
  return "CREATE TABLE IF NOT EXISTS " + quote_identifier(bucket_table(table, g)) +
         " (\n"
         "  `record_type` INT UNSIGNED NOT NULL,\n"
         "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
         // The UTC start of the bucket (see sql.hpp).
         "  `bucket` " +
         std::string(g == store::granularity::day ? "DATE" : "DATETIME") +
         " NOT NULL,\n"
         "  `slot` SMALLINT UNSIGNED NOT NULL,\n"
         "  `count` BIGINT NOT NULL,\n"
         "  PRIMARY KEY (`record_type`, `record_id`, `bucket`, `slot`),\n"
         // Retention deletes the oldest buckets of one record type through this.
         "  KEY `by_age` (`record_type`, `bucket`)\n"
         ") ENGINE=InnoDB";
}

std::string bucket_upsert_statement(std::string_view table, store::granularity g,
                                    std::span<const store::bucket_row> rows) {
  std::string sql;
  sql.reserve(128 + rows.size() * 64);
  sql += "INSERT INTO ";
  sql += quote_identifier(bucket_table(table, g));
  sql += " (`record_type`, `record_id`, `bucket`, `slot`, `count`) VALUES ";
  append_tuples(sql, rows, [&](const store::bucket_row& r) {
    append_values(sql, r.record_type, r.record_id, bucket_literal(g, r.bucket), r.slot, r.delta);
  });
  sql += " ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)";
  return sql;
}

std::string bucket_series_select(std::string_view table, store::granularity g,
                                 std::uint32_t record_type, std::uint64_t record_id,
                                 std::int64_t from, std::int64_t to) {
  // TIMESTAMPDIFF from the epoch as text: unix seconds of a UTC value, whatever the
  // session's time_zone.
  std::string sql =
      "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', `bucket`), "
      "SUM(`count`) FROM " +
      quote_identifier(bucket_table(table, g)) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
  sql += " AND `bucket` BETWEEN " + bucket_literal(g, from) + " AND " + bucket_literal(g, to);
  sql += " GROUP BY `bucket` ORDER BY `bucket`";
  return sql;
}

std::string bucket_prune_select(std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t before, std::size_t limit) {
  // A plain (consistent, lock-free) read of the index alone: it holds record_id and
  // slot after (record_type, bucket), in the order asked for.
  std::string sql =
      "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', `bucket`), `record_id` FROM " +
      quote_identifier(bucket_table(table, g)) + " FORCE INDEX (`by_age`) WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `bucket` < " + bucket_literal(g, before) + " ORDER BY `bucket`, `record_id` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string bucket_prune_delete(std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t bucket,
                                std::span<const std::uint64_t> record_ids) {
  // Primary-key prefixes (record_type, record_id, bucket): MariaDB reads and locks
  // those rows only, whatever share of the type's rows is old.
  std::string sql =
      "DELETE FROM " + quote_identifier(bucket_table(table, g)) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `bucket` = " + bucket_literal(g, bucket) + " AND `record_id` IN ";
  append_int_list(sql, record_ids);
  return sql;
}

}  // namespace slotted::db

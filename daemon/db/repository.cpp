#include "db/repository.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "db/errors.hpp"
#include "db/log_positions.hpp"
#include "db/sql_text.hpp"
#include "db/top.hpp"
#include "db/write_path.hpp"

namespace slotted::db {

void migrate(connection& conn, const std::string& table) {
  conn.execute(create_counters_table(conn.sql(), table));
  conn.execute(create_ledger_table(conn.sql()));
  // A ledger made before its prune of every instance's rows lacks their index.
  if (conn.query(conn.sql().index_exists_select(conn.quote(ledger_table),
                                                conn.quote(ledger_time_index)))
          .empty())
    conn.execute(ledger_add_time_index());
  conn.execute(create_dirty_table(conn.sql()));
  conn.execute(create_adoptions_table(conn.sql()));
  conn.execute(create_idempotency_keys_table(conn.sql()));
  migrate_idempotency_keys(conn);
  migrate_positions_table(conn);
}

void migrate_idempotency_keys(connection& conn) {
  const std::string quoted = conn.quote(idempotency_keys_table);
  bool has_created = false, has_created_ms = false;
  for (const auto& r : conn.query(conn.sql().columns_select(quoted))) {
    has_created = has_created || r[0].value_or("") == "created";
    has_created_ms = has_created_ms || r[0].value_or("") == "created_ms";
  }
  if (!has_created) return;  // this version's layout (or converted by a run before)
  const bool has_by_age =
      !conn.query(conn.sql().index_exists_select(quoted, conn.quote("by_age"))).empty();
  for (const auto& sql : idempotency_keys_upgrade(has_created_ms, has_by_age)) conn.execute(sql);
}

bool table_exists(connection& conn, std::string_view name) {
  return !conn.query(conn.sql().table_exists_select(conn.quote(name))).empty();
}

namespace {
// The largest value an integer column of this DATA_TYPE / COLUMN_TYPE can hold.
std::uint64_t integer_max(const std::string& data_type, const std::string& column_type) {
  const bool is_unsigned = column_type.find("unsigned") != std::string::npos;
  const auto bits = data_type == "tinyint"     ? 8
                    : data_type == "smallint"  ? 16
                    : data_type == "mediumint" ? 24
                    : data_type == "int"       ? 32
                    : data_type == "integer"   ? 32  // PostgreSQL's name
                                               : 64;
  return is_unsigned ? (bits == 64 ? UINT64_MAX : (std::uint64_t{1} << bits) - 1)
                     : (std::uint64_t{1} << (bits - 1)) - 1;
}
}  // namespace

std::uint64_t integer_column_max(const std::string& data_type, const std::string& column_type) {
  return integer_max(data_type, column_type);
}

bool is_integer_type(const std::string& data_type) {
  return data_type == "tinyint" || data_type == "smallint" || data_type == "mediumint" ||
         data_type == "int" || data_type == "integer" || data_type == "bigint";
}

key_limits verify_schema(connection& conn, const std::string& table, bool with_rollups) {
  const std::string quoted = conn.quote(table);
  const auto columns = conn.query(conn.sql().columns_select(quoted));
  if (columns.empty()) {
    throw db_error(error_class::fatal, "table `" + table +
                                           "` does not exist in the configured database; run "
                                           "slotted-counterd --migrate");
  }
  for (const char* needed : {"record_type", "record_id", "slot", "count"}) {
    const bool found = std::any_of(columns.begin(), columns.end(),
                                   [&](const result_row& r) { return r[0] && *r[0] == needed; });
    if (!found) {
      throw db_error(error_class::fatal, "table `" + table + "` has no column `" + needed + "`");
    }
  }
  const auto index_rows = conn.query(conn.sql().unique_index_columns_select(quoted));
  std::map<std::string, std::vector<std::string>> unique_indexes;
  for (const auto& r : index_rows) unique_indexes[r[0].value_or("")].push_back(r[1].value_or(""));
  const std::vector<std::string> wanted{"record_type", "record_id", "slot"};
  const bool has_key = std::any_of(unique_indexes.begin(), unique_indexes.end(),
                                   [&](const auto& entry) { return entry.second == wanted; });
  if (!has_key) {
    throw db_error(
        error_class::fatal,
        "table `" + table +
            "` needs a PRIMARY or UNIQUE key on exactly "
            "(record_type, record_id, slot) for its upsert (ON DUPLICATE KEY UPDATE, ON CONFLICT)");
  }
  for (const auto needed : {ledger_table, dirty_table}) {
    if (needed == dirty_table && !with_rollups) continue;
    if (!table_exists(conn, needed)) {
      throw db_error(error_class::fatal, "table `" + std::string(needed) +
                                             "` does not exist; run slotted-counterd --migrate");
    }
  }
  key_limits limits;
  // Optional, so that a daemon upgraded before its --migrate keeps flushing what has no
  // Idempotency-Key; keyed requests are refused until the table is there.
  if (table_exists(conn, idempotency_keys_table)) {
    // Migrated only once `created` is gone: --migrate adds `created_ms` (0 at first),
    // fills it from `created`, then drops `created`. Keyed requests taken while a row
    // still holds 0 would take a committed key over (applied twice), and the keys prune
    // would delete such rows.
    const auto has = [&](const char* column) {
      return !conn.query(conn.sql().column_exists_select(conn.quote(idempotency_keys_table),
                                                         conn.quote(column)))
                  .empty();
    };
    limits.idempotency_keys = has("created_ms") && !has("created");
    limits.idempotency_keys_unmigrated = !limits.idempotency_keys;
  } else {
    limits.idempotency_keys = false;
  }
  for (const auto& r : columns) {
    const std::string name = r[0].value_or(""), type = r[1].value_or(""), full = r[2].value_or("");
    if (name == "record_type")
      limits.max_record_type =
          std::min<std::uint64_t>(ingest::max_record_type, integer_max(type, full));
    if (name == "record_id") limits.max_record_id = integer_max(type, full);
  }
  return limits;
}

std::optional<autoincrement_state> read_autoincrement(connection& conn, const std::string& table) {
  const std::string quoted = conn.quote(table);
  const auto columns = conn.query(conn.sql().autoincrement_column_select(quoted));
  if (columns.empty()) return std::nullopt;
  const auto next = conn.query(
      conn.sql().autoincrement_next_select(quoted, conn.quote(columns[0][0].value_or(""))));
  if (next.empty() || next[0].size() < 2 || !next[0][0]) return std::nullopt;
  autoincrement_state st;
  st.column = columns[0][0].value_or("");
  st.column_type = columns[0][2].value_or("");
  st.max = integer_max(columns[0][1].value_or(""), st.column_type);
  st.next = std::stoull(*next[0][0]);
  st.increment = std::max<std::uint64_t>(1, std::stoull(next[0][1].value_or("1")));
  return st;
}

void verify_rollup_target(connection& conn, const rollup_target& t) {
  const std::string where = "rollup target of record_type " + std::to_string(t.record_type) + ": ";
  if (!table_exists(conn, t.table)) {
    throw db_error(error_class::fatal, where + "table `" + t.table + "` does not exist");
  }
  for (const auto& column : {t.id_column, t.count_column}) {
    const auto found =
        conn.query(conn.sql().column_exists_select(conn.quote(t.table), conn.quote(column)));
    if (found.empty()) {
      throw db_error(error_class::fatal,
                     where + "table `" + t.table + "` has no column `" + column + "`");
    }
  }
}

std::optional<dirty_cursor> rollup_start(connection& conn, std::uint32_t record_type) {
  const auto rows = conn.query(dirty_max_record_id(record_type));
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return std::nullopt;
  dirty_cursor cursor;
  cursor.max_record_id = std::stoull(*rows[0][0]);
  return cursor;
}

namespace {
// Sets the owning rows of `ids`; when the statement is refused for its data, bisects the
// ids until each one at fault stands alone, and adds those to `refused`. It runs inside
// rollup_chunk's transaction: a statement refused for its data is rolled back alone, so
// what the others set stays. InnoDB rolls back the statement alone; where a failed
// statement aborts the whole transaction (PostgreSQL), each try takes a savepoint
// (never on MariaDB: two round trips a chunk for nothing, and a savepoint in a Galera
// writeset has had replay bugs).
void rollup_update_bisecting(connection& conn, const std::string& counters_table,
                             const rollup_target& t, std::span<const std::uint64_t> ids,
                             std::vector<rollup_refusal>& refused) {
  const bool savepoint = conn.error_aborts_transaction();
  if (savepoint) conn.execute("SAVEPOINT rollup_try");
  try {
    conn.execute(conn.sql().rollup_update(counters_table, t.record_type, t.table, t.id_column,
                                          t.count_column, ids));
    if (savepoint) conn.execute("RELEASE SAVEPOINT rollup_try");
  } catch (const db_error& e) {
    if (!e.data_error()) throw;
    if (savepoint) {
      conn.execute("ROLLBACK TO SAVEPOINT rollup_try");
      conn.execute("RELEASE SAVEPOINT rollup_try");
    }
    if (ids.size() == 1) {
      const auto rows = conn.query(select_count(counters_table, t.record_type, ids.front()));
      const std::string sum = rows.empty() || !rows[0][0] ? "0" : *rows[0][0];
      refused.push_back({ids.front(), sum, e.what()});
      return;
    }
    const std::size_t half = ids.size() / 2;
    rollup_update_bisecting(conn, counters_table, t, ids.first(half), refused);
    rollup_update_bisecting(conn, counters_table, t, ids.subspan(half), refused);
  }
}
}  // namespace

rollup_chunk_result rollup_chunk(connection& conn, const std::string& counters_table,
                                 const rollup_target& t, std::size_t batch_size,
                                 dirty_cursor& cursor) {
  rollup_chunk_result r;
  std::vector<dirty_mark> marks;
  for (const auto& row : conn.query(dirty_select(t.record_type, batch_size, cursor))) {
    marks.push_back({std::stoull(row[0].value_or("0")), conn.quote(row[1].value_or("")),
                     std::stoull(row[2].value_or("0"))});
  }
  r.marks = marks.size();
  if (marks.empty()) return r;
  cursor.started = true;
  cursor.last_record_id = marks.back().record_id;
  cursor.last_quoted_instance = marks.back().quoted_instance;
  std::vector<std::uint64_t> ids;
  for (const auto& m : marks) {
    if (ids.empty() || ids.back() != m.record_id) ids.push_back(m.record_id);  // marks come sorted
  }
  // One transaction, the owning rows locked first (in id order) and their SUMs read after
  // (a fresh read of each statement under READ COMMITTED): a roller of another instance
  // holding some of them waits, or is waited for, before a SUM is read. With each
  // statement on its own, an UPDATE that read its SUMs, then waited on an owning row,
  // could write an older total over the newer one another roller wrote meanwhile (and
  // whose mark it deleted), to stay until the counter was counted again.
  std::size_t owners = 0;
  in_transaction(conn, [&] {
    owners = conn.query(owner_ids_select(t.table, t.id_column, ids)).size();
    rollup_update_bisecting(conn, counters_table, t, ids, r.refused);
    if (!r.refused.empty()) {
      // The refused counters keep their marks: rolled up once their SUM fits again.
      std::erase_if(marks, [&](const dirty_mark& m) {
        return std::any_of(r.refused.begin(), r.refused.end(),
                           [&](const rollup_refusal& f) { return f.record_id == m.record_id; });
      });
    }
    if (!marks.empty()) conn.execute(dirty_delete(t.record_type, marks));
    conn.execute(commit);
  });
  // A refused id has an owning row (the UPDATE met it).
  r.records = owners - std::min(owners, r.refused.size());
  r.missing_owners = ids.size() - std::min(owners, ids.size());
  return r;
}

std::uint64_t dirty_gen_of(const batch_identity& id) {
  std::uint64_t gen = id.run_id ^ (id.seq * 0x9E3779B97F4A7C15ull);
  gen ^= gen >> 31;
  return gen & 0x7fffffffffffffffull;
}

__int128 slot_count(const std::optional<std::string>& text) {
  const std::string_view s = text ? std::string_view(*text) : std::string_view("0");
  const bool negative = !s.empty() && s.front() == '-';
  std::size_t i = negative ? 1 : 0;
  __int128 v = 0;
  const std::size_t first = i;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9' && i - first < 38; ++i)
    v = v * 10 + (s[i] - '0');
  // A DECIMAL column prints a fraction: accepted when it is zero.
  if (i < s.size() && s[i] == '.' && i > first) {
    ++i;
    while (i < s.size() && s[i] == '0') ++i;
  }
  if (i == first || i != s.size())
    throw db_error(error_class::other, "a slot row's count is not an integer: " + std::string(s));
  return negative ? -v : v;
}

ledger_prune_result prune_ledger(connection& conn, const batch_identity& keep_from,
                                 std::uint64_t own_max_age_seconds,
                                 std::uint64_t others_max_age_seconds, std::size_t chunk,
                                 int max_chunks) {
  ledger_prune_result r;
  const std::string instance = conn.quote(keep_from.instance_id);
  // Chunks of one side until one comes short; true when the last was still full.
  const auto side = [&](const auto& select, std::uint64_t max_age) {
    for (int i = 0; i < max_chunks; ++i) {
      // One DELETE per (instance, run) met, in key order.
      std::map<std::pair<std::string, std::uint64_t>, std::vector<std::uint64_t>> runs;
      std::size_t read = 0;
      for (const auto& row : conn.query(select())) {
        ++read;
        if (!row[0] || !row[1] || !row[2]) continue;
        runs[{*row[0], std::stoull(*row[1])}].push_back(std::stoull(*row[2]));
      }
      for (auto& [run, seqs] : runs) {
        std::sort(seqs.begin(), seqs.end());
        conn.execute(ledger_delete(conn.sql(), conn.quote(run.first), run.second, seqs, max_age));
        r.deleted += conn.affected_rows();
      }
      if (read < chunk) return false;
    }
    return true;
  };
  const bool own_behind = side(
      [&] {
        return ledger_prune_select(conn.sql(), instance, keep_from.run_id, keep_from.seq,
                                   own_max_age_seconds, chunk);
      },
      own_max_age_seconds);
  const bool others_behind = side(
      [&] {
        return ledger_stale_select(conn.sql(), instance, keep_from.run_id, others_max_age_seconds,
                                   chunk);
      },
      others_max_age_seconds);
  r.behind = own_behind || others_behind;
  return r;
}

std::vector<std::uint64_t> committed_split_parts(connection& conn, const std::string& instance_id,
                                                 std::uint64_t run_id) {
  // Split parts carry their split index above the low 44 bits (2 and up), so they are a
  // range of the ledger's primary key.
  const auto rows =
      conn.query(ledger_seqs_select(conn.quote(instance_id), run_id, std::uint64_t{2} << 44));
  std::vector<std::uint64_t> seqs;
  for (const auto& row : rows) {
    if (row[0]) seqs.push_back(std::stoull(*row[0]));
  }
  return seqs;
}

__int128 read_count(connection& conn, const std::string& table, std::uint32_t record_type,
                    std::uint64_t record_id) {
  const auto rows = conn.query(select_count(table, record_type, record_id));
  if (rows.empty() || !rows[0][0]) return 0;
  return slot_count(rows[0][0]);  // exact, as a reset sums it
}

std::vector<std::pair<std::uint64_t, __int128>> read_counts(
    connection& conn, const std::string& table, std::uint32_t record_type,
    std::span<const std::uint64_t> record_ids) {
  std::vector<std::pair<std::uint64_t, __int128>> out;
  if (record_ids.empty()) return out;
  for (const auto& row : conn.query_limited(select_counts(table, record_type, record_ids))) {
    if (!row[0]) continue;
    out.emplace_back(std::stoull(*row[0]), slot_count(row[1]));
  }
  return out;
}

void migrate_buckets(connection& conn, const std::string& table,
                     const store::bucket_spec& buckets) {
  for (const auto g : store::all_granularities) {
    if (buckets.uses(g)) conn.execute(create_bucket_table(conn.sql(), table, g));
  }
}

std::vector<std::string> missing_bucket_tables(connection& conn, const std::string& table,
                                               const store::bucket_spec& buckets) {
  std::vector<std::string> missing;
  for (const auto g : store::all_granularities) {
    if (buckets.uses(g) && !table_exists(conn, bucket_table(table, g)))
      missing.push_back(bucket_table(table, g));
  }
  return missing;
}

std::vector<std::pair<std::int64_t, __int128>> read_series(
    connection& conn, const std::string& table, store::granularity g, std::uint32_t record_type,
    std::uint64_t record_id, std::int64_t from, std::int64_t to) {
  std::vector<std::pair<std::int64_t, __int128>> out;
  for (const auto& row :
       conn.query(bucket_series_select(conn.sql(), table, g, record_type, record_id, from, to))) {
    if (!row[0] || !row[1]) continue;
    out.emplace_back(std::stoll(*row[0]), slot_count(row[1]));
  }
  return out;
}

prune_chunk prune_buckets(connection& conn, const std::string& table, store::granularity g,
                          std::uint32_t record_type, std::int64_t before, std::size_t limit,
                          bool totals) {
  const auto rows =
      conn.query(bucket_prune_select(conn.sql(), table, g, record_type, before, limit));
  // In (bucket, record_id) order: one DELETE per bucket met, each committing on its own;
  // with `totals`, the DELETE of their bucket totals (db/top.hpp) with it, in one
  // transaction (the lock order's 4 then 5), so none is left without its rows.
  std::uint64_t deleted = 0;
  std::vector<std::uint64_t> ids;
  std::int64_t bucket = 0;
  const auto flush_ids = [&] {
    if (ids.empty()) return;
    if (!totals) {
      conn.execute(bucket_prune_delete(table, g, record_type, bucket, ids));
      deleted += conn.affected_rows();
      ids.clear();
      return;
    }
    in_transaction(conn, [&] {
      conn.execute(bucket_prune_delete(table, g, record_type, bucket, ids));
      deleted += conn.affected_rows();
      conn.execute(bucket_totals_prune_delete(table, g, record_type, bucket, ids));
      conn.execute(commit);
    });
    ids.clear();
  };
  for (const auto& row : rows) {
    if (!row[0] || !row[1]) continue;
    const std::int64_t b = std::stoll(*row[0]);
    const std::uint64_t id = std::stoull(*row[1]);
    if (!ids.empty() && b != bucket) flush_ids();
    bucket = b;
    // A counter's slots are consecutive rows: one id each.
    if (ids.empty() || ids.back() != id) ids.push_back(id);
  }
  flush_ids();
  return {rows.size(), deleted};
}

std::optional<std::int64_t> database_clock(connection& conn) {
  const auto rows = conn.query(conn.sql().now_seconds_select());
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return std::nullopt;
  return std::stoll(*rows[0][0]);
}

namespace {
std::int64_t host_clock() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::int64_t later_clock(connection& conn) {
  const std::int64_t here = host_clock();
  return std::max(here, database_clock(conn).value_or(here));
}

std::int64_t earlier_clock(connection& conn) {
  const std::int64_t here = host_clock();
  return std::min(here, database_clock(conn).value_or(here));
}

}  // namespace slotted::db

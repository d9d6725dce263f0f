// The ledger table's statements (sql.hpp): exactly-once bookkeeping of flush batches.
#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

namespace {
// " WHERE `instance_id` = I AND `run_id` = R": the rows of one run of one instance.
void append_run(std::string& sql, std::string_view quoted_instance, std::uint64_t run_id) {
  sql += " WHERE `instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
}
// " AND `committed_at` < NOW(3) - INTERVAL n SECOND" (MariaDB)
void append_older_than(std::string& sql, const dialect& d, std::uint64_t max_age_seconds) {
  sql += " AND ";
  sql += d.older_than("`committed_at`", max_age_seconds);
}
}  // namespace

std::string ledger_seqs_select(std::string_view quoted_instance, std::uint64_t run_id,
                               std::uint64_t min_seq) {
  std::string sql = "SELECT `batch_seq` FROM " + quote_identifier(ledger_table);
  append_run(sql, quoted_instance, run_id);
  sql += " AND `batch_seq` >= ";
  append_int(sql, min_seq);
  return sql;
}

std::string create_ledger_table(const dialect& d) {
  return d.create_table(
      {std::string(ledger_table),
       {{"`instance_id`", column_type::text64},
        {"`run_id`", column_type::u64},
        {"`batch_seq`", column_type::u64},
        {"`row_count`", column_type::u32},
        {"`committed_at`", column_type::moment_ms, false, "CURRENT_TIMESTAMP(3)"}},
       "`instance_id`, `run_id`, `batch_seq`",
       {{"by_age", "`instance_id`, `committed_at`"},
        // Every instance's old rows (an instance that never comes back
        // leaves its own).
        {ledger_time_index, "`committed_at`"}}});
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

std::string ledger_prune_select(const dialect& d, std::string_view quoted_instance,
                                std::uint64_t run_id, std::uint64_t keep_from_seq,
                                std::uint64_t max_age_seconds, std::size_t limit) {
  std::string sql =
      "SELECT `instance_id`, `run_id`, `batch_seq` FROM " + quote_identifier(ledger_table);
  append_run(sql, quoted_instance, run_id);
  sql += " AND `batch_seq` < ";
  append_int(sql, keep_from_seq);
  append_older_than(sql, d, max_age_seconds);
  sql += " ORDER BY `committed_at` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string ledger_stale_select(const dialect& d, std::string_view quoted_instance,
                                std::uint64_t run_id, std::uint64_t max_age_seconds,
                                std::size_t limit) {
  std::string sql = "SELECT `instance_id`, `run_id`, `batch_seq` FROM " +
                    quote_identifier(ledger_table) + " WHERE " +
                    d.older_than("`committed_at`", max_age_seconds) + " AND NOT (`instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += ") ORDER BY `committed_at` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string ledger_delete(const dialect& d, std::string_view quoted_instance, std::uint64_t run_id,
                          std::span<const std::uint64_t> seqs, std::uint64_t max_age_seconds) {
  std::string sql = d.delete_by_primary_key(quote_identifier(ledger_table));
  append_run(sql, quoted_instance, run_id);
  sql += " AND `batch_seq` IN ";
  append_int_list(sql, seqs);
  append_older_than(sql, d, max_age_seconds);
  return sql;
}

}  // namespace slotted::db

// The Idempotency-Keys table's statements (sql.hpp).
#include <algorithm>

#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

std::string create_idempotency_keys_table(const dialect& d) {
  // idem_key is binary: keys are compared byte for byte ("a" and "A" are two keys).
  return d.create_table({std::string(idempotency_keys_table),
                         {{"`idem_key`", column_type::ascii_key128},
                          {"`body_hash`", column_type::hash32},
                          {"`accepted`", column_type::u32},
                          {"`instance_id`", column_type::text64},
                          {"`run_id`", column_type::u64},
                          {"`batch_seq`", column_type::u64},
                          // When the first request with the key arrived: unix milliseconds
                          // by the database's clock (see sql.hpp).
                          {"`created_ms`", column_type::i64}},
                         "`idem_key`",
                         {{"by_age", "`created_ms`"}}});
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

namespace {
// The database's clock, unix milliseconds, less `age_ms`: when something `age_ms` old
// happened.
std::string database_ms_ago(const dialect& d, std::int64_t age_ms) {
  return std::string(d.now_ms()) + " - " + std::to_string(std::max<std::int64_t>(0, age_ms));
}
}  // namespace

std::string idempotency_keys_claim(const dialect& d,
                                   std::span<const idempotency::keyed_request> requests,
                                   std::span<const std::string> quoted_keys,
                                   std::string_view quoted_instance, std::uint64_t run_id,
                                   std::uint64_t batch_seq, std::chrono::milliseconds window,
                                   std::int64_t local_now_ms) {
  const std::string batch_id =
      std::string(quoted_instance) + "," + std::to_string(run_id) + "," + std::to_string(batch_seq);
  const std::string t = quote_identifier(idempotency_keys_table);
  std::string out = "INSERT INTO " + t +
                    " (`idem_key`, `body_hash`, `accepted`, `instance_id`, `run_id`, "
                    "`batch_seq`, `created_ms`) VALUES ";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (i > 0) out.push_back(',');
    out += "(" + quoted_keys[i] + ",'" + idempotency::hex(r.hash) + "'," +
           std::to_string(r.increments.size()) + "," + batch_id + "," +
           database_ms_ago(d, r.received_ms > 0 ? local_now_ms - r.received_ms : 0) + ")";
  }
  // `created_ms` is assigned last, so every test sees the row's old value (MariaDB
  // assigns in order; PostgreSQL's assignments all see the old row); incoming() is the
  // arriving request's.
  const std::string expired = d.existing(t, "`created_ms`") + " < " + d.incoming("`created_ms`") +
                              " - " + std::to_string(window.count());
  const auto take = [&](const char* name) {
    const std::string column = std::string("`") + name + "`";
    return column + " = " + d.choose(expired, d.incoming(column), d.existing(t, column));
  };
  out += d.on_conflict("`idem_key`") + take("body_hash") + ", " + take("accepted") + ", " +
         take("instance_id") + ", " + take("run_id") + ", " + take("batch_seq") + ", " +
         take("created_ms");
  return out;
}

std::string idempotency_keys_select_locked(const dialect& d,
                                           std::span<const std::string> quoted_keys) {
  std::string out = "SELECT `idem_key`, `body_hash`, `instance_id`, `run_id`, `batch_seq` FROM " +
                    quote_identifier(idempotency_keys_table) + " WHERE `idem_key` IN (";
  for (std::size_t i = 0; i < quoted_keys.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += quoted_keys[i];
  }
  return out + ") " + std::string(d.share_lock());
}

std::string idempotency_keys_find(const dialect& d, std::string_view quoted_key,
                                  std::int64_t age_ms, std::chrono::milliseconds window) {
  // The claim's test for a row to take over, negated, for an arrival `age_ms` ago.
  return "SELECT `body_hash`, `accepted` FROM " + quote_identifier(idempotency_keys_table) +
         " WHERE `idem_key` = " + std::string(quoted_key) +
         " AND `created_ms` >= " + database_ms_ago(d, age_ms) + " - " +
         std::to_string(window.count());
}

std::string idempotency_keys_prune_select(const dialect& d, std::chrono::milliseconds age,
                                          std::size_t limit) {
  return "SELECT `idem_key` FROM " + quote_identifier(idempotency_keys_table) +
         " WHERE `created_ms` < " + database_ms_ago(d, age.count()) +
         " ORDER BY `created_ms` LIMIT " + std::to_string(limit);
}

std::string idempotency_keys_delete(const dialect& d, std::span<const std::string> quoted_keys,
                                    std::chrono::milliseconds age) {
  // Through the primary key alone (see ledger_delete).
  std::string out =
      d.delete_by_primary_key(quote_identifier(idempotency_keys_table)) + " WHERE `idem_key` IN (";
  for (std::size_t i = 0; i < quoted_keys.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += quoted_keys[i];
  }
  return out + ") AND `created_ms` < " + database_ms_ago(d, age.count());
}

}  // namespace slotted::db

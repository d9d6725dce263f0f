#pragma once
// The database operations the daemon performs, each on a caller-provided connection.
// Blocking; never on HTTP I/O threads. Failures throw db_error (see errors.hpp).

#include <cstdint>
#include <span>
#include <string>

#include "db/connection.hpp"
#include "db/sql.hpp"

namespace slotted::db {

// Creates the counters table and the ledger if missing. Idempotent; never alters an
// existing table (a seed-style table is left as it is).
void migrate(connection& conn, const std::string& table);

// Checks that `table` has record_type, record_id, slot and count and a unique key on
// exactly (record_type, record_id, slot), and that the ledger exists. Throws a fatal
// db_error naming what is wrong and how to fix it.
void verify_schema(connection& conn, const std::string& table);

enum class commit_outcome { applied, already_applied };

struct batch_identity {
  std::string instance_id;
  std::uint64_t run_id = 0;
  std::uint64_t seq = 0;
};

// Applies `rows` and records the batch in the ledger, in one transaction. If the
// ledger already holds the batch (an earlier attempt committed but its reply was
// lost), nothing is applied and already_applied is returned. On error the transaction
// is rolled back (when the connection still allows it) and db_error is thrown.
commit_outcome commit_batch(connection& conn, const std::string& table, const batch_identity& id,
                            std::span<const counter_row> rows);

// Deletes old ledger rows of this instance (see sql.hpp ledger_prune). Returns rows deleted.
std::uint64_t prune_ledger(connection& conn, const batch_identity& keep_from,
                           std::uint64_t max_age_seconds);

// SUM(count) over the slots of one counter.
std::int64_t read_count(connection& conn, const std::string& table, std::uint32_t record_type,
                        std::uint64_t record_id);

}  // namespace slotted::db

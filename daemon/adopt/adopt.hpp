#pragma once
// Adoption of an existing owning column (docs/adopting.md): `--adopt NAME` takes each
// owning row's count into the counter, so that from then on the owning column and every
// read equal history + everything counted through the daemon; until then the roller
// leaves the column alone (check_adopted).
//
// Mechanism. A read-only validation pass first (one aggregated scan: every row's id in
// the counters table's record_id range, its count not NULL, not negative, within the
// counters table's count column); any violation is exit 2 naming the row, nothing
// applied. Then the target's row in `slotted_counterd_adoptions` (db/sql.hpp), and
// batches of `batch_rows` owning rows in id order, each ONE transaction, through the one
// write of counts (db/write_path.hpp apply, its guard db/adoption.hpp adoption_guard):
//   1. SELECT the adoption row FOR UPDATE: two runs at once take turns batch by batch,
//      each batch starting from the cursor the other committed; 'done' ends a run;
//   2. the batch's upper id; the batch's rows checked again (the table may have changed
//      since the validation; a violation rolls the batch back, exit 2);
//   3. INSERT ... SELECT into slot 0 of each counter, ON DUPLICATE KEY UPDATE adding to
//      what the daemon may have written (db/sql_adopt.hpp take_batch_insert); with
//      counters[].top, the rows read once instead, and slot 0 and the totals written
//      from those values after 4 (db/adoption.hpp);
//   4. the cursor, rows and total moved on in the adoption row ('done' with the last);
//   5. COMMIT.
// A SIGKILL or a lost connection at any moment leaves the cursor and the applied rows of
// one transaction: a rerun goes on from the cursor and ends exact.
//
// Lock order (db/repository.hpp, "Lock order"): the adoption row first (a table no
// flush, reset or rollup transaction writes), then slot rows in (record_type,
// record_id) order, the order db::apply takes them in for every writer; owning rows
// are read without a lock (a consistent read under READ COMMITTED), so the roller's
// UPDATE of owning rows waits on nothing an adoption holds.

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

#include "config/config.hpp"
#include "db/connection.hpp"
#include "db/repository.hpp"

namespace slotted::adopt {

struct options {
  std::string counter;      // counters[].name
  bool no_history = false;  // --no-history: record as adopted, take nothing
  std::size_t batch_rows = 10000;
};

// Runs `--adopt` on `cfg`; returns the exit code: 0 done (or done already), 2 bad input
// (an undeclared counter, one without a rollup target, a column that is no integer, an
// owning row out of range; the daemon's tables missing), 1 a database error. Progress
// on `err`, the summary on `out`.
// `connect` opens the connection it works on (the caller's: adopt/ depends on db/ and
// config/ only, not on the application).
int run(const config::daemon_config& cfg, const options& o,
        const std::function<db::connection()>& connect, std::ostream& out, std::ostream& err);

enum class adoption { adopted, not_adopted, no_table };

// Whether the roller may roll `t` up: its adoption row is 'done', or its owning column
// holds only zeros (then recorded 'done' in mode 'zeros', so that values the daemon
// writes later do not undo it; INSERT IGNORE, so a 'running' --adopt wins). no_table: the
// adoptions table does not exist (a daemon upgraded before its --migrate). Throws
// db_error.
adoption check_adopted(db::connection& conn, const db::rollup_target& t);

}  // namespace slotted::adopt

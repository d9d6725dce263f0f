// db::apply (db/write_path.hpp), the one write of counts, through its guards: a ledger
// row already there, a position row that no longer holds `from` and an adoption that is
// done apply nothing and leave no transaction open; the marks go to the counters
// written; an adoption batch takes what it read and checked, or nothing.
#include "db/write_path.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "db/repository.hpp"
#include "db/sql_adopt.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"
#include "support/commit_rows.hpp"
#include "support/mariadb_server.hpp"

namespace slotted::test {
namespace {

const std::string write_path_table = "slotted_counters";

class WritePath : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = shared_mariadb().create_database();
    auto conn = connect();
    db::migrate(conn, write_path_table);
    db::migrate_positions_table(conn);
    dedupe_.declare(5, store::granularity::hour);
    db::migrate_uniques(conn, write_path_table, dedupe_);
  }
  db::connection connect() const { return shared_mariadb().connect(database_); }
  std::int64_t sum(std::uint64_t id) const {
    return shared_mariadb().query_int(
        database_,
        "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters WHERE "
        "record_type = 5 AND record_id = " +
            std::to_string(id));
  }
  std::int64_t marks() const {
    return shared_mariadb().query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_dirty");
  }

  std::string database_;
  store::dedupe_spec dedupe_;
  // Every counter of record type 5 is rolled up: marked when written.
  const db::write_rules rules_{.table = write_path_table,
                               .dedupe = &dedupe_,
                               .marks = [](std::span<const db::counter_row> rows) { return rows; }};
};

db::log_position position_at(std::uint64_t offset) {
  db::log_position p;
  p.file = {1, 2, 3, 4};
  p.offset = offset;
  return p;
}

TEST_F(WritePath, ALedgerRowAlreadyThereAppliesNothing) {
  auto conn = connect();
  const std::vector<db::counter_row> rows{{5, 1, 3, 7}};
  const db::write_set ws{.guard = db::ledger_guard{{"a", 1, 1}, rows.size()}, .rows = rows};
  EXPECT_EQ(db::apply(conn, ws, rules_).outcome, db::commit_outcome::applied);
  const auto again = db::apply(conn, ws, rules_);
  EXPECT_EQ(again.outcome, db::commit_outcome::already_applied);
  EXPECT_EQ(again.rows, 0u);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(sum(1), 7);
}

TEST_F(WritePath, APositionRowThatMovedAppliesNothing) {
  auto conn = connect();
  const std::vector<db::counter_row> rows{{5, 1, 0, 2}};
  const auto pass = [&](std::optional<db::log_position> from, std::uint64_t to) {
    return db::apply(
               conn,
               {.guard = db::position_guard{"i", "/var/log/a", std::move(from), position_at(to)},
                .rows = rows},
               rules_)
        .outcome;
  };
  EXPECT_EQ(pass(std::nullopt, 10), db::commit_outcome::applied);
  // A second first pass (another writer inserted the row): nothing.
  EXPECT_EQ(pass(std::nullopt, 10), db::commit_outcome::moved);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(pass(position_at(10), 20), db::commit_outcome::applied);
  // From a position the row no longer holds: nothing.
  EXPECT_EQ(pass(position_at(10), 30), db::commit_outcome::moved);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(sum(1), 4);
  EXPECT_EQ(db::read_position(conn, "i", "/var/log/a"), position_at(20));
}

// A log pass's unique entry counted before by another pass adds no row and no mark;
// its own rows still count and are marked.
TEST_F(WritePath, AUniqueEntryCountedBeforeIsNeitherCountedNorMarked) {
  auto conn = connect();
  const std::int64_t window = 1763942400;
  const std::vector<store::unique_entry> entries{{5, 2, window, "client", window + 5}};
  const std::vector<db::counter_row> rows{{5, 1, 4, 1}};
  const db::write_set first{.guard = db::position_guard{"i", "/a", std::nullopt, position_at(10)},
                            .uniques = entries,
                            .slot = 4};
  const auto counted = db::apply(conn, first, rules_);
  ASSERT_EQ(counted.outcome, db::commit_outcome::applied);
  EXPECT_EQ(counted.counted, 1u);
  EXPECT_EQ(sum(2), 1);
  conn.execute("DELETE FROM slotted_counterd_dirty");
  const db::write_set second{
      .guard = db::position_guard{"i", "/a", position_at(10), position_at(20)},
      .rows = rows,
      .uniques = entries,
      .slot = 4};
  const auto again = db::apply(conn, second, rules_);
  ASSERT_EQ(again.outcome, db::commit_outcome::applied);
  EXPECT_EQ(again.duplicates, 1u);
  EXPECT_EQ(again.rows, 1u);
  EXPECT_EQ(sum(2), 1);
  EXPECT_EQ(sum(1), 1);
  EXPECT_EQ(marks(), 1);  // counter 1's; none for counter 2
}

// A reset through apply: its slot rows deleted under its ledger row, what they held
// reported, its mark written when the rules keep the counter; the same reset again finds
// its ledger row and applies nothing (a lost COMMIT reply is resolved so).
TEST_F(WritePath, AResetAppliesOnceUnderItsLedgerRowAndSaysWhatItCleared) {
  auto conn = connect();
  ASSERT_EQ(test::commit_rows(conn, write_path_table, {"a", 1, 1}, {{5, 1, 3, 7}, {5, 2, 3, 1}}),
            db::commit_outcome::applied);
  ASSERT_EQ(test::commit_rows(conn, write_path_table, {"a", 1, 2}, {{5, 1, 4, 2}}),
            db::commit_outcome::applied);
  const db::write_set reset{
      .guard = db::ledger_guard{{"a", 1, 3}, 0}, .reset = store::counter_key{5, 1}, .mark_gen = 9};
  db::write_result out;
  db::apply(conn, reset, rules_, out);
  EXPECT_EQ(out.outcome, db::commit_outcome::applied);
  EXPECT_TRUE(out.commit_sent);
  EXPECT_EQ(static_cast<std::int64_t>(out.cleared), 9);
  EXPECT_EQ(out.cleared_rows, 2u);
  EXPECT_EQ(sum(1), 0);
  EXPECT_EQ(sum(2), 1);
  EXPECT_EQ(shared_mariadb().query_int(database_,
                                       "SELECT COUNT(*) FROM slotted_counterd_dirty WHERE "
                                       "record_id = 1 AND gen = 9"),
            1);
  const auto again = db::apply(conn, reset, rules_);
  EXPECT_EQ(again.outcome, db::commit_outcome::already_applied);
  EXPECT_EQ(again.cleared_rows, 0u);
  EXPECT_FALSE(conn.in_transaction());
}

// An adoption's batches, both ways (db/adoption.hpp): taken by the server (a counter
// without top-N) and read once (with top-N, its totals written from the same values).
// Each takes the next owning rows after the cursor into slot 0 (counts of 0 passed over,
// no marks), moves the cursor with its rows and total, and the last one ends the
// adoption; after it a batch applies nothing.
const db::rollup_target adopted{5, "owners", "id", "n", "owned"};

class WritePathAdoption : public WritePath, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    WritePath::SetUp();
    auto conn = connect();
    if (GetParam()) db::migrate_totals(conn, write_path_table, top_);
    conn.execute("CREATE TABLE owners (id BIGINT PRIMARY KEY, n BIGINT)");
    conn.execute("INSERT INTO owners VALUES (1, 7), (2, 0), (3, 5), (4, 9)");
    conn.execute(db::state_insert(db::mariadb_dialect(), adopted, "running", "history"));
  }
  std::string state() const {
    const auto rows = shared_mariadb().connect(database_).query(
        "SELECT state, COALESCE(last_id, 'none'), rows_taken, total_taken FROM "
        "slotted_counterd_adoptions");
    std::string s;
    for (const auto& v : rows.at(0)) s += v.value_or("NULL") + " ";
    return s;
  }
  std::int64_t total(std::uint64_t id) const {
    return shared_mariadb().query_int(
        database_,
        "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters_totals WHERE "
        "record_type = 5 AND record_id = " +
            std::to_string(id));
  }
  db::write_rules rules() const {
    return {.table = write_path_table, .top = GetParam() ? &top_ : &store::no_top()};
  }
  const store::top_spec top_{{5}, store::no_buckets()};
};

INSTANTIATE_TEST_SUITE_P(BothWays, WritePathAdoption, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "ReadOnceWithTop" : "ByTheServer";
                         });

TEST_P(WritePathAdoption, BatchesTakeTheirRowsIntoSlotZeroAndTheLastEndsIt) {
  auto conn = connect();
  const db::write_set batch{.guard = db::adoption_guard{adopted, {}, 3}};
  const auto first = db::apply(conn, batch, rules());
  EXPECT_EQ(first.outcome, db::commit_outcome::applied);
  EXPECT_EQ(first.taken, 2u);
  EXPECT_EQ(static_cast<std::int64_t>(first.total), 12);
  EXPECT_FALSE(first.last);
  EXPECT_EQ(state(), "running 3 2 12 ");
  const auto second = db::apply(conn, batch, rules());
  EXPECT_EQ(second.taken, 1u);
  EXPECT_TRUE(second.last);
  EXPECT_EQ(state(), "done 4 3 21 ");
  EXPECT_EQ(db::apply(conn, batch, rules()).outcome, db::commit_outcome::already_applied);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(sum(1), 7);
  EXPECT_EQ(sum(3), 5);
  EXPECT_EQ(sum(4), 9);
  EXPECT_EQ(shared_mariadb().query_int(database_,
                                       "SELECT COUNT(*) FROM slotted_counters WHERE slot <> 0 "
                                       "OR record_id = 2"),
            0);
  EXPECT_EQ(marks(), 0);
  if (GetParam()) {
    EXPECT_EQ(total(1), 7);
    EXPECT_EQ(total(3), 5);
    EXPECT_EQ(total(4), 9);
  }
}

// A row that changed past what the counters table holds since the validation pass (here:
// never validated) is refused by name, and nothing of its batch is taken: no slot row,
// the cursor where it was.
TEST_P(WritePathAdoption, ARowPastItsLimitsIsRefusedByNameAndNothingIsTaken) {
  auto conn = connect();
  conn.execute("UPDATE owners SET n = -1 WHERE id = 3");
  const db::write_set batch{.guard = db::adoption_guard{adopted, {}, 3}};
  try {
    db::apply(conn, batch, rules());
    ADD_FAILURE() << "a negative owning count was taken";
  } catch (const db::adoption_refused& e) {
    EXPECT_EQ(std::string(e.what()),
              "owning row `owners`.`id` = 3 (`n` = -1): its count is negative; fix the row and "
              "run --adopt owned again");
  }
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(state(), "running none 0 0 ");
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT COUNT(*) FROM slotted_counters"), 0);
  // An id past the counters table's record_id column, in the last batch.
  conn.execute("UPDATE owners SET n = 5 WHERE id = 3");
  const db::write_set past{.guard = db::adoption_guard{adopted, {.max_id = 3}, 10}};
  EXPECT_THROW(db::apply(conn, past, rules()), db::adoption_refused);
  EXPECT_EQ(state(), "running none 0 0 ");
}

// A count past INT64_MAX is refused by name, never taken as a negative count: read once,
// whatever the counters table's count column holds (a BIGINT UNSIGNED one allows it);
// by the server, past the column. ZEROFILL values are read by their value, not by their
// padded text.
TEST_P(WritePathAdoption, ACountPastInt64IsRefusedAndZeroFilledValuesAreReadByValue) {
  auto conn = connect();
  conn.execute("ALTER TABLE owners MODIFY n BIGINT(25) UNSIGNED ZEROFILL");
  conn.execute("UPDATE owners SET n = 10000000000000000000 WHERE id = 3");
  const db::row_limits limits{.max_count = GetParam() ? UINT64_MAX : INT64_MAX};
  const db::write_set batch{.guard = db::adoption_guard{adopted, limits, 3}};
  try {
    db::apply(conn, batch, rules());
    ADD_FAILURE() << "a count past INT64_MAX was taken";
  } catch (const db::adoption_refused& e) {
    EXPECT_EQ(std::string(e.what()),
              "owning row `owners`.`id` = 3 (`n` = 0000010000000000000000000): its count is "
              "larger than a slot row takes (at most 9223372036854775807, the counters table's "
              "count column); fix the row and run --adopt owned again");
  }
  EXPECT_EQ(state(), "running none 0 0 ");
  conn.execute("UPDATE owners SET n = 5 WHERE id = 3");
  const auto r = db::apply(conn, batch, rules());
  EXPECT_EQ(r.taken, 2u);
  EXPECT_EQ(static_cast<std::int64_t>(r.total), 12);
  EXPECT_EQ(sum(3), 5);
}

}  // namespace
}  // namespace slotted::test

#pragma once
// The committed read positions of access logs (docs/guarantees.md, Counting from access
// logs): one row per (instance_id, path) in `slotted_counterd_log_positions`, written in
// the same transaction as the counts its lines produced.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.hpp"
#include "db/sql.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"

namespace slotted::logs {

inline constexpr std::string_view positions_table = "slotted_counterd_log_positions";

// What identifies a file: device and inode, and a hash of its first `head_len` bytes
// (at most head_bytes; as many as were read when the position was committed).
inline constexpr std::size_t head_bytes = 256;
struct file_identity {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint32_t head_len = 0;
  std::uint64_t head_hash = 0;
  bool operator==(const file_identity&) const = default;
};

struct log_position {
  file_identity file;
  // Bytes of the file counted: after a newline, or, when `in_long_line`, inside a line
  // longer than the reader's bound whose rest (to its newline) is skipped.
  std::uint64_t offset = 0;
  bool in_long_line = false;
  // The file's modification time when the position was committed (nanoseconds since the
  // epoch): when the file itself is gone, the files written after it are those modified
  // later. Not compared: it tells nothing of what was counted.
  std::int64_t file_mtime_ns = 0;
  bool operator==(const log_position& o) const {
    return file == o.file && offset == o.offset && in_long_line == o.in_long_line;
  }
};

// The position another instance committed for a path (positions_of_others).
struct other_position {
  std::string instance_id;
  log_position position;
};

// FNV-1a, 64 bits: stable across builds and versions (it is stored).
std::uint64_t head_hash(std::string_view bytes);

// Pure SQL builders. `quoted_*` are connection::quote literals.
std::string create_positions_table();
std::string position_select(std::string_view quoted_instance, std::string_view quoted_path,
                            bool for_update);
std::string position_insert(std::string_view quoted_instance, std::string_view quoted_path,
                            const log_position& p);
std::string position_update(std::string_view quoted_instance, std::string_view quoted_path,
                            const log_position& p);

// The statements that bring a positions table made by an earlier version to this one's
// columns (`columns`: the names it has); none when it has them.
std::vector<std::string> positions_table_upgrade(const std::vector<std::string>& columns);
// Creates the table, or adds what an earlier version's lacks (--migrate).
void migrate_positions_table(db::connection& conn);
// Throws a fatal db_error when the positions table is missing, or lacks a column of this
// version (run --migrate).
void verify_positions_table(db::connection& conn);

// The committed position of (instance, path); nullopt when there is none. Throws db_error.
std::optional<log_position> read_position(db::connection& conn, std::string_view instance,
                                          std::string_view path);

// A file by its device and inode (a position's file_dev and file_ino).
struct file_inode {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
};

// The positions committed under another instance_id than `instance` that name `path`, or
// one of `files` by device and inode whatever its path there (the same file read through
// a bind mount or a symlink).
std::vector<other_position> positions_of_others(db::connection& conn, std::string_view instance,
                                                std::string_view path,
                                                std::span<const file_inode> files);

// One batch of a log's lines.
struct log_batch {
  std::string instance_id;
  std::string path;
  std::optional<log_position> from;        // the position the lines were read from (none: first)
  log_position to;                         // the position after them
  std::span<const db::counter_row> rows;   // sorted by (record_type, record_id)
  std::span<const db::counter_row> dirty;  // rows of rolled-up counters
  std::span<const store::bucket_row> buckets;  // sorted
  // Entries of counters with `dedupe` (db/uniques.hpp), in the uniques table's key
  // order: each counts +1 under `slot` (and in the buckets of `bucket_spec`) when no
  // batch counted it before (its rows tagged by db::unique_tag).
  std::span<const store::unique_entry> uniques;
  std::uint16_t slot = 0;
  const store::bucket_spec* bucket_spec = nullptr;
  const store::dedupe_spec* dedupe = nullptr;  // the windows of the entries' counters
  std::uint64_t dirty_gen = 0;
  std::size_t max_rows_per_statement = 1000;
  // The counters whose rows are added to the totals of top-N (db/top.hpp); null: none.
  const store::top_spec* top = nullptr;
};

enum class log_commit { applied, conflict };

// In one transaction, in the lock order of db/repository.hpp (the position row in place
// of a ledger row: it is this source's own, first; then the unique entries, slot rows,
// bucket rows, dirty marks): locks the position row (SELECT ... FOR UPDATE), and when it still
// holds `from` (or is absent when `from` is), writes `to` and the counts; else rolls back and
// returns conflict (another writer moved it: the caller rereads it). On error the
// transaction is rolled back when the connection allows and db_error is thrown.
log_commit commit_log_batch(db::connection& conn, const std::string& table, const log_batch& b);

}  // namespace slotted::logs

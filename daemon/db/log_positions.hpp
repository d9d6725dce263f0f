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

namespace slotted::db {

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

// Pure SQL builders. `quoted_instance` is a connection::quote literal, `quoted_path` a
// connection::quote_bytes one (the path is a binary column); the device, inode and hash
// are written as dialect::u64_bits.
std::string create_positions_table(const dialect& d);
std::string position_select(std::string_view quoted_instance, std::string_view quoted_path,
                            bool for_update);
std::string position_insert(const dialect& d, std::string_view quoted_instance,
                            std::string_view quoted_path, const log_position& p);
std::string position_update(const dialect& d, std::string_view quoted_instance,
                            std::string_view quoted_path, const log_position& p);

// The statement an operator runs, once instance `from` is stopped for good, to give its
// positions to instance `to` (shown in an error message, never run by the daemon):
// instance ids as the config gives them, single-quoted.
std::string positions_move_statement(std::string_view from, std::string_view to);

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

// The guard of a log pass's transaction (db::apply, the lock order's 1: the position row
// is this source's own): locks the position row of (instance_id, path) (SELECT ... FOR
// UPDATE), and when it still holds `from` (or is absent when `from` is) writes `to` and
// returns true; else rolls back and returns false (another writer moved it: the caller
// rereads it). Throws db_error.
bool claim_position(db::connection& conn, std::string_view instance_id, std::string_view path,
                    const std::optional<log_position>& from, const log_position& to);

}  // namespace slotted::db

#pragma once
// The statement text each engine writes its own way: one implementation per engine
// (db/dialect_mariadb.cpp, db/dialect_postgresql.cpp), asked for by the SQL builders
// through the connection's driver (connection::sql()). Everything else in a statement
// is written once, for both.
//
// One notation for identifiers: the builders backquote them (`record_type`), as MariaDB
// does; the PostgreSQL driver sends them double-quoted (postgresql_text below). A
// fragment here is in that notation too.
//
// Pure functions, no I/O, thread-safe.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace slotted::db {

// A column's type as the daemon's tables use it; each engine names its own
// (dialect::create_table). PostgreSQL has no unsigned integers: its bigint holds every
// u32, and a u64 up to 2^63 - 1.
enum class column_type {
  u8,             // a flag
  u16,            // a slot
  u32,            // a record type, a count of rows
  u64,            // an id, a run, a sequence number
  i64,            // a count, a time in unix units
  total,          // a sum of counts: 30 digits
  big_total,      // a sum of an owning column's counts: 65 digits
  text64,         // an instance id
  ascii64,        // a table's name
  ascii_bin64,    // an identifier compared byte for byte
  hash32,         // 32 hex digits
  ascii_key128,   // an Idempotency-Key (printable ASCII), compared byte for byte
  bytes128,       // a client, compared byte for byte
  bytes512,       // a path
  date_time,      // a UTC date and time, seconds
  date,           // a UTC date
  moment,         // a point in time, seconds (TIMESTAMP)
  moment_ms,      // a point in time, milliseconds
  state_enum,     // 'running' or 'done'
  adoption_mode,  // 'history', 'no_history' or 'zeros'
};

struct column_def {
  std::string_view name;  // backquoted
  column_type type;
  bool nullable = false;
  std::string_view default_value = {};  // SQL text both engines read, or none
};

// A secondary index: its name (unquoted; PostgreSQL's index names are the schema's, so
// it prefixes the table's) and its columns ("`a`, `b` DESC").
struct index_def {
  std::string_view name;
  std::string_view columns;
};

// A table the daemon creates when missing (CREATE TABLE IF NOT EXISTS), written once for
// both engines.
struct table_def {
  std::string name;  // unquoted
  std::vector<column_def> columns;
  std::string_view primary_key;  // "`a`, `b`"
  std::vector<index_def> indexes = {};
};

class dialect {
 public:
  virtual ~dialect() = default;

  // Upserts: "INSERT INTO t (...) VALUES ..." + on_conflict(key) + assignments, written
  // with existing() and incoming(). `key` lists the columns of the unique key the
  // inserted rows may collide on ("`a`, `b`"; PostgreSQL names it in the statement).
  virtual std::string on_conflict(std::string_view key) const = 0;
  // A column of the row already there, in an assignment of on_conflict; `table` as it is
  // named in the INSERT (quoted).
  virtual std::string existing(std::string_view table, std::string_view column) const = 0;
  // A column of the row that collided.
  virtual std::string incoming(std::string_view column) const = 0;
  // The assignment "column = existing + incoming".
  std::string adding(std::string_view table, std::string_view column) const;

  // An INSERT that leaves a row whose key is there already as it is:
  // insert_ignore() + "t (...) VALUES ..." + ignore_conflicts().
  virtual std::string_view insert_ignore() const = 0;
  virtual std::string_view ignore_conflicts() const = 0;

  // `then` when `condition` holds, else `otherwise`.
  virtual std::string choose(std::string_view condition, std::string_view then,
                             std::string_view otherwise) const = 0;

  // The clause of a read that locks the rows it reads in share mode.
  virtual std::string_view share_lock() const = 0;
  // `select` locking its rows for update, waiting at most `seconds` for them (else a
  // lock wait timeout); on PostgreSQL that limit holds for the rest of the transaction.
  virtual std::string locked_within(std::string_view select, std::uint32_t seconds) const = 0;

  // Time. The condition "`column` (a timestamp) is more than `seconds` before now".
  virtual std::string older_than(std::string_view column, std::uint64_t seconds) const = 0;
  // The current UTC time, for a DATETIME (MariaDB) or timestamp column.
  virtual std::string_view utc_now() const = 0;
  // The database's clock in unix milliseconds (a 64-bit integer expression).
  virtual std::string_view now_ms() const = 0;
  // A statement whose one row is the database's clock in unix seconds.
  virtual std::string_view now_seconds_select() const = 0;
  // The unix seconds of a UTC date or date-time column.
  virtual std::string epoch_seconds(std::string_view column) const = 0;

  // " FORCE INDEX (index)", where the engine takes a hint ("PRIMARY" or a quoted name).
  virtual std::string index_hint(std::string_view index) const = 0;
  // "DELETE FROM t" reading only the primary key's rows (followed by a WHERE).
  virtual std::string delete_by_primary_key(std::string_view table) const = 0;
  // Deletes up to `limit` rows of `table` matching `where`, the first in `order`.
  virtual std::string delete_first(std::string_view table, std::string_view where,
                                   std::string_view order, std::size_t limit) const = 0;
  // A binary column as upper-case hex.
  virtual std::string hex(std::string_view column) const = 0;
  // An unsigned 64-bit value (a hash, an inode) as its u64 column stores it: MariaDB's
  // BIGINT UNSIGNED takes it as it is, PostgreSQL's bigint the same 64 bits as a signed
  // number; std::stoull reads either text back to the value.
  virtual std::string u64_bits(std::uint64_t value) const = 0;

  // Whether share_lock() may end a SELECT with GROUP BY (MariaDB) or not (PostgreSQL).
  virtual bool locks_beside_group_by() const = 0;
  // Whether CREATE and DROP take part in a transaction (PostgreSQL) or commit it
  // (MariaDB).
  virtual bool transactional_ddl() const = 0;
  // What an operator runs to widen an autoincrement column that is running out (a
  // message's remedy, not run by the daemon).
  virtual std::string widen_autoincrement(std::string_view table,
                                          std::string_view column) const = 0;

  // The statement (several, on PostgreSQL, in one string) that creates `t` with its
  // indexes when it does not exist.
  virtual std::string create_table(const table_def& t) const = 0;

  // Schema checks, for a table of the current database (MariaDB) or schema (PostgreSQL).
  // Every argument named quoted_* is a quoted string literal (connection::quote), not an
  // identifier. Names and types are read in lower case.
  // One row if the table exists.
  virtual std::string table_exists_select(std::string_view quoted_table) const = 0;
  // (name, data type, column type) of each column; the column type says "unsigned" of an
  // unsigned integer (MariaDB; PostgreSQL's are all signed).
  virtual std::string columns_select(std::string_view quoted_table) const = 0;
  // (index name, column) of the columns of each unique index, in index order.
  virtual std::string unique_index_columns_select(std::string_view quoted_table) const = 0;
  // One row if the table has this column.
  virtual std::string column_exists_select(std::string_view quoted_table,
                                           std::string_view quoted_column) const = 0;
  // One row if the table has the index that create_table names `quoted_index`.
  virtual std::string index_exists_select(std::string_view quoted_table,
                                          std::string_view quoted_index) const = 0;
  // (name, data type, column type) of the column the table numbers its rows with
  // (AUTO_INCREMENT; an identity or serial column); no row if none.
  virtual std::string autoincrement_column_select(std::string_view quoted_table) const = 0;
  // (the next number it gives, its increment), for that column.
  virtual std::string autoincrement_next_select(std::string_view quoted_table,
                                                std::string_view quoted_column) const = 0;

  // Sets owner.count_column to SUM(count) over the slots of record_type for each of
  // `ids` that has an owning row; 0 for one without slot rows. Names unquoted.
  virtual std::string rollup_update(std::string_view counters_table, std::uint32_t record_type,
                                    std::string_view owner_table, std::string_view id_column,
                                    std::string_view count_column,
                                    std::span<const std::uint64_t> ids) const = 0;

 protected:
  // What both engines' CREATE TABLE share: for each column of `t`, "  <name> <type>
  // [NOT ]NULL[ DEFAULT <default>][ CHECK (<name> IN (<choices>))],\n" (the type named by
  // `type_name`, the CHECK where `choices` gives values), then "  PRIMARY KEY (<key>)".
  static std::string column_lines(const table_def& t, const char* (*type_name)(column_type),
                                  std::string_view (*choices)(column_type));
  // "SELECT <columns> FROM information_schema.<view><where_table><quoted_table><rest>":
  // `where_table` selects the current database's or schema's table, up to its name.
  static std::string schema_select(std::string_view where_table, std::string_view columns,
                                   std::string_view view, std::string_view quoted_table,
                                   std::string_view rest);
};

// PostgreSQL keeps the first 63 bytes of a name (NAMEDATALEN - 1); create_table refuses
// a longer table or index name.
inline constexpr std::size_t max_identifier_bytes = 63;

const dialect& mariadb_dialect();
const dialect& postgresql_dialect();

// `sql` in the daemon's notation as PostgreSQL reads it: each backquoted identifier
// double-quoted. String literals ('...', E'...', with '' inside) and double-quoted
// identifiers are left as they are; the daemon's statements hold no comments and no
// dollar quoting. A statement that ends inside a quote is refused (db_error, fatal): the
// notation was broken, and what it would mean is not known.
std::string postgresql_text(std::string_view sql);

}  // namespace slotted::db

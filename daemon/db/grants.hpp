#pragma once
// --print-grants: the GRANT statements mysql.user needs for everything a config does
// (README: Production install, docs/production.md). Pure functions, no I/O.

#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace slotted::db {

// A user or host name as a single-quoted string literal: ' doubled, \ escaped (the
// server's default sql_mode, without NO_BACKSLASH_ESCAPES). Throws
// std::invalid_argument for an empty name or one with a NUL byte, which no account has.
std::string quote_account_part(std::string_view what, std::string_view name);

// One statement per table (no terminating ';'), each granting cfg.mysql.user at `host`
// only the privileges the daemon uses on it, in cfg.mysql.database:
//  - the counters table (mysql.table) and the bucket tables its counters keep
//    (`<table>_hour`, `<table>_day`): SELECT, INSERT, UPDATE, DELETE (flush upserts,
//    reads, reset, retention);
//  - the ledger: SELECT, INSERT, DELETE; the Idempotency-Key table: SELECT, INSERT,
//    UPDATE, DELETE;
//  - with a rollup target: the dirty marks (SELECT, INSERT, UPDATE, DELETE), the
//    adoption table (SELECT, INSERT, UPDATE), and on each owning table column
//    privileges only: SELECT (id_column, count_column), UPDATE (count_column), the
//    columns of every target on that table together.
// No CREATE, ALTER or DROP: --migrate runs as an administrator. Information_schema
// shows a user the tables and columns it holds a privilege on, which is what the
// daemon's schema checks read. Throws std::invalid_argument (quote_account_part).
std::vector<std::string> grant_statements(const config::daemon_config& cfg,
                                          std::string_view host = "%");

// What the account that runs --migrate needs on cfg.mysql.database, for 'ADMIN'@'HOST'
// (placeholders): CREATE, ALTER, INDEX for the tables, DROP for the top-N totals tables
// --migrate rebuilds (DROP TABLE IF EXISTS, RENAME TABLE), and the row privileges its
// data migrations use.
std::string admin_grant_statement(const config::daemon_config& cfg);

// --print-grants: the statements, each followed by ';' on its own line, to `out`, then
// the administrator's (admin_grant_statement) as an SQL comment; returns 0, or 2 after
// saying on `err` why no statement can be printed.
int print_grants(const config::daemon_config& cfg, std::string_view host, std::ostream& out,
                 std::ostream& err);

}  // namespace slotted::db

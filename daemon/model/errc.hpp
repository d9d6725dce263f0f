#pragma once
// The daemon's expected failures: one error category (named "slotted"), one code per
// thing a caller does differently. A failure travels as a result (model/result.hpp): a
// code of this category plus, where the operator needs it, a detail text for logs and
// answers (the database's message, errno's text). http::router::failure_response is
// the one place a code becomes an HTTP status; what cannot be handled where it happens
// is an exception (a db_error, a wal_error, a 500), not a code.

#include <string>
#include <system_error>
#include <type_traits>

namespace slotted {

enum class errc {
  // The request cannot be taken as it is (the client corrects it, or waits).
  over_limit = 1,  // a pending bound is reached (flush.max_pending_keys, _bytes): 503, retry 5 s
  out_of_range,    // a counter's pending sum would pass 2^62: 422
  unavailable,     // not now, no finer cause known: 503, retry in 5 s
  conflict,        // an Idempotency-Key used with another body: 422
  draining,        // the daemon (or the flusher) is shutting down: 503, retry in 1 s
  // Not now, each 503 with a retry in 5 s; the code says why.
  not_exact_yet,         // a read: batches are being committed or in doubt throughout
  retry_later,           // the work waits for other work: a key being logged, batches
                         // formed before a reset not yet written
  outcome_unknown,       // a reset's COMMIT in doubt, not resolved before the stop deadline
  database_unavailable,  // the database cannot be reached or refused the statement
  wal_write_failed,      // the WAL could not be written (nothing logged)
  wal_sync_failed,       // the WAL could not be synced (the append is cut back)
  deadline_passed,       // the stop deadline passed before the backlog was written
  read_timed_out,        // a read's statement passed its time limit (max_statement_time)
  too_costly,            // a top-N whose merge passed its row bound (the data decides):
                         // 422, the same request stops again until the counts change
  invalid_input,         // the input is wrong (a request's parameter, a config value): a
                         // 400 for a request; the failure's detail names what and why
};
// The last code, for tests that walk them all.
inline constexpr errc last_errc = errc::invalid_input;

// The category of errc: name() "slotted", message() the text a client is told when the
// caller has nothing more precise.
const std::error_category& slotted_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), slotted_category()};
}

}  // namespace slotted

template <>
struct std::is_error_code_enum<slotted::errc> : std::true_type {};

#include "model/errc.hpp"

namespace slotted {
namespace {

class slotted_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "slotted"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::over_limit:
        return "too much pending (flush.max_pending_keys or flush.max_pending_bytes); retry "
               "later";
      case errc::out_of_range:
        return "a counter's pending sum would pass 2^62 (4611686018427387904) in either "
               "direction; nothing of this request was applied";
      case errc::unavailable:
        return "not available now; retry later";
      case errc::conflict:
        return "this Idempotency-Key was used with another body; nothing of this request was "
               "applied";
      case errc::draining:
        return "shutting down";
      case errc::not_exact_yet:
        return "the counter is being written; retry";
      case errc::retry_later:
        return "waiting for other work; retry later";
      case errc::outcome_unknown:
        return "the outcome is unknown; retry later";
      case errc::database_unavailable:
        return "the database is not reachable; retry later";
      case errc::wal_write_failed:
        return "the write-ahead log cannot be written; retry later";
      case errc::wal_sync_failed:
        return "the write-ahead log cannot be synced; retry later";
      case errc::deadline_passed:
        return "the shutdown deadline passed before the backlog was written";
      case errc::read_timed_out:
        return "the read took too long and was stopped by the database; retry later";
      case errc::too_costly:
        return "this read would cost too much; narrow it";
      case errc::invalid_input:
        return "the input is not valid";
    }
    return "unknown slotted error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& slotted_category() noexcept {
  static const slotted_error_category category;
  return category;
}

}  // namespace slotted

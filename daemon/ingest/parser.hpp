#pragma once
// Parses and validates an increments body (README: HTTP API) completely before anything is
// applied, so a request either yields every increment or an error and nothing (G2).
//
// Thread-safety: parse_increments() may be called from any number of threads at once;
// each thread keeps its own parser state.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/buckets.hpp"
#include "model/increment.hpp"
#include "model/uniques.hpp"

namespace slotted::ingest {

enum class body_format { json, ndjson };

// "application/json" or "application/x-ndjson", parameters (";charset=utf-8") and case
// ignored; nullopt for anything else.
std::optional<body_format> format_for(std::string_view content_type);

// Which record types a request may name: declared counters by number or name, and any
// number when undeclared types are accepted. Immutable after construction.
class type_registry {
 public:
  type_registry() = default;
  type_registry(std::vector<std::pair<std::string, std::uint32_t>> declared,
                bool accept_undeclared);

  std::optional<std::uint32_t> by_name(std::string_view name) const;
  bool allows(std::uint32_t record_type) const;

 private:
  std::unordered_map<std::string, std::uint32_t> by_name_;
  std::unordered_set<std::uint32_t> declared_;
  bool accept_undeclared_ = false;
};

struct parse_error {
  unsigned status = 400;  // 400, or 413 for too many items
  std::string message;
  std::optional<std::size_t> index;  // 0-based item to blame, when there is one
};

// Appends the body's increments to `out` (cleared first). On error returns it, and
// `out` must be ignored.
// Bodies of the usual shape (plain field names, integer values) are read by a fast
// scanner; everything else, errors included, by simdjson.
std::optional<parse_error> parse_increments(std::string_view body, body_format format,
                                            const type_registry& types, std::size_t max_items,
                                            std::vector<increment>& out);

// The same with simdjson alone, without the fast scanner: what parse_increments() must
// agree with on every body, increments and errors alike (tests and increments_fuzz).
std::optional<parse_error> parse_increments_reference(std::string_view body, body_format format,
                                                      const type_registry& types,
                                                      std::size_t max_items,
                                                      std::vector<increment>& out);

// The times of counters with buckets (README: HTTP API, `at`), once a body is parsed:
// an increment of such a counter without `at` gets `now` (unix seconds, the time the
// daemon received it); one with `at` older than the counter's longest retention or more
// than max_at_ahead_seconds after `now` is an error for the whole request (400, the
// item to blame), and the increments must then be ignored. Counters without buckets
// are left alone: their `at` was checked as an integer and means nothing more.
std::optional<parse_error> resolve_times(std::span<increment> increments,
                                         const store::bucket_spec& buckets, std::int64_t now);

}  // namespace slotted::ingest

#pragma once
// A scripted http::backend for router and listener tests: answers what it is told to,
// records what it was given, and keeps the callbacks of asynchronous calls so that a
// test answers them later, from the thread it chooses.

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "http/backend.hpp"

namespace slotted::test {

class fake_backend : public http::backend {
 public:
  bool draining() const override { return draining_; }
  bool ready() const override { return ready_; }
  // As counter_service chooses: keyed, durable_ (a WAL: answered later through add_done_),
  // else answered at once with add_answer_.
  void submit(ingest::increment_request& request, const submit_answer& answer) override {
    {
      std::lock_guard lock(mutex_);
      if (request.keyed()) {
        keyed_.push_back(request);  // a copy, as counter_service: the router reuses it
        add_done_ = answer.later();
        return;
      }
      added_.push_back(request.increments);
      if (durable_) {
        add_done_ = answer.later();
        return;
      }
    }
    answer.now(add_answer_);
  }
  void find_keyed(std::string key, idempotency::body_hash hash, std::int64_t,
                  done_fn done) override {
    std::lock_guard lock(mutex_);
    found_.push_back({std::move(key), hash});
    find_done_ = std::move(done);
  }
  void read_counter(store::counter_key key, done_fn done) override {
    std::lock_guard lock(mutex_);
    read_key_ = key;
    read_done_ = std::move(done);
  }
  void read_counters(std::uint32_t record_type, std::vector<std::uint64_t> record_ids,
                     done_fn done) override {
    std::lock_guard lock(mutex_);
    read_key_ = {record_type, 0};
    read_ids_ = std::move(record_ids);
    read_done_ = std::move(done);
  }
  void read_top(std::uint32_t record_type, std::optional<top_range> range, std::size_t limit,
                done_fn done) override {
    std::lock_guard lock(mutex_);
    read_key_ = {record_type, 0};
    top_range_ = range;
    top_limit_ = limit;
    read_done_ = std::move(done);
  }
  void reset_counter(store::counter_key key, done_fn done) override {
    std::lock_guard lock(mutex_);
    reset_key_ = key;
    reset_done_ = std::move(done);
  }
  void read_series(store::counter_key key, store::granularity g, std::int64_t from, std::int64_t to,
                   done_fn done) override {
    std::lock_guard lock(mutex_);
    read_key_ = key;
    series_ = {g, from, to};
    read_done_ = std::move(done);
  }
  void flush_now(done_fn done) override {
    std::lock_guard lock(mutex_);
    flush_done_ = std::move(done);
  }
  void rollup_now(done_fn done) override {
    std::lock_guard lock(mutex_);
    rollup_done_ = std::move(done);
  }
  std::string metrics_text() override { return metrics_text_(); }

  // The script (set before requests arrive).
  bool draining_ = false;
  bool ready_ = true;
  bool durable_ = false;  // whether requests are answered later, as with a WAL
  http::backend_result add_answer_;
  std::function<std::string()> metrics_text_ = [] { return std::string("# no metrics\n"); };

  // What it was given.
  std::mutex mutex_;
  std::vector<std::vector<ingest::increment>> added_;
  std::vector<idempotency::keyed_request> keyed_;
  std::vector<std::pair<std::string, idempotency::body_hash>> found_;  // find_keyed's keys
  store::counter_key read_key_, reset_key_;
  std::vector<std::uint64_t> read_ids_;  // read_counters
  std::optional<top_range> top_range_;   // read_top
  std::size_t top_limit_ = 0;
  struct series_args {
    store::granularity g = store::granularity::none;
    std::int64_t from = 0, to = 0;
  } series_;
  done_fn add_done_, find_done_, read_done_, reset_done_, flush_done_, rollup_done_;
};

}  // namespace slotted::test

// libFuzzer harness: the WAL's record reader and replay on arbitrary bytes.
//
// Input: one mode byte, then:
//   mode 0: a segment's bytes, scanned by durable::scan_segment. The records before
//           valid_bytes must scan clean on their own, and `ok` means all of it.
//   mode 1: a description of records (kinds and contents), written with the log's own
//           append_* functions, then cut at a chosen length. The whole log must replay
//           to what the records say (a model of increments, unique entries, batches,
//           snapshots and committed marks), and the cut log must be `ok` or a torn tail ending at the
//           last whole record before the cut: never corruption, never a lost record.
//   mode 2: the bytes as one or two segment files, recovered by durable::recover()
//           in a scratch directory: a wal_error or a result, nothing else.

#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "durable/daemon_log.hpp"
#include "durable/record.hpp"
#include "durable/recovery.hpp"
#include "metrics/metrics.hpp"
#include "wal/wal.hpp"

using namespace slotted;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "wal_fuzz: invariant broken: %s\n", what);
  std::abort();
}

using sums = std::map<store::counter_key, std::int64_t>;

sums summed(const std::vector<store::pending_delta>& deltas) {
  sums out;
  for (const auto& d : deltas) out[d.key] += d.delta;
  std::erase_if(out, [](const auto& kv) { return kv.second == 0; });
  return out;
}

bool same_batches(const std::vector<store::flush_batch>& a,
                  const std::vector<store::flush_batch>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].run_id != b[i].run_id || a[i].seq != b[i].seq || a[i].rows.size() != b[i].rows.size())
      return false;
    const auto *ua = store::unique_of(a[i]), *ub = store::unique_of(b[i]);
    if ((ua == nullptr) != (ub == nullptr) ||
        (ua != nullptr && (ua->entries != ub->entries || ua->slot != ub->slot)))
      return false;
    for (std::size_t j = 0; j < a[i].rows.size(); ++j) {
      const auto &x = a[i].rows[j], &y = b[i].rows[j];
      if (x.record_type != y.record_type || x.record_id != y.record_id || x.slot != y.slot ||
          x.delta != y.delta)
        return false;
    }
  }
  return true;
}

void raw_segment(std::string_view data) {
  durable::replay_state state;
  const auto r = durable::scan_segment(data, state);
  if (r.valid_bytes > data.size()) fail("valid_bytes past the end");
  if (r.outcome == durable::scan_result::status::ok && r.valid_bytes != data.size())
    fail("ok without reading everything");
  if (r.outcome != durable::scan_result::status::ok && r.problem.empty())
    fail("damage without a problem");
  (void)state.deltas();
  // The prefix as a segment. A damaged magic in front of whole format-2 records is
  // corruption whose valid prefix is those records: they scan clean behind the magic.
  std::string prefix(data.substr(0, r.valid_bytes));
  const std::string_view magic = durable::segment_magic;
  if (!data.starts_with(magic) && r.outcome == durable::scan_result::status::corrupt &&
      r.valid_bytes > magic.size()) {
    std::string mended = std::string(magic) + std::string(data.substr(magic.size()));
    durable::replay_state mended_state;
    if (durable::scan_segment(mended, mended_state).valid_bytes == r.valid_bytes)
      prefix.replace(0, magic.size(), magic);
  }
  durable::replay_state prefix_state;
  const auto p = durable::scan_segment(prefix, prefix_state);
  if (p.outcome != durable::scan_result::status::ok || p.valid_bytes != r.valid_bytes)
    fail("the valid prefix does not scan clean on its own");
  if (summed(prefix_state.deltas()) != summed(state.deltas()) ||
      !same_batches(prefix_state.batches(), state.batches()) ||
      prefix_state.uniques() != state.uniques())
    fail("the valid prefix replays to something else");
}

// 0 to `most` unique entries (counters[].dedupe), clients of 1 to 128 bytes.
std::vector<store::unique_entry> make_entries(FuzzedDataProvider& in, std::size_t most) {
  std::vector<store::unique_entry> out(in.ConsumeIntegralInRange<std::size_t>(0, most));
  for (auto& e : out) {
    e.record_type = in.ConsumeIntegral<std::uint32_t>();
    e.record_id = in.ConsumeIntegral<std::uint64_t>();
    // As the daemon makes them: a window starting on an hour, a time inside its day.
    e.window = in.ConsumeIntegralInRange<std::int64_t>(0, ingest::max_at / 3600) * 3600;
    e.at = std::min(e.window + in.ConsumeIntegralInRange<std::int64_t>(0, 86399), ingest::max_at);
    e.client = in.ConsumeRandomLengthString(store::max_client_bytes);
    if (e.client.empty()) e.client = "c";
  }
  return out;
}

std::vector<store::flush_batch> make_batches(FuzzedDataProvider& in) {
  std::vector<store::flush_batch> out(in.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (auto& b : out) {
    b.run_id = in.ConsumeIntegral<std::uint64_t>();
    b.seq = in.ConsumeIntegral<std::uint64_t>();
    // A unique batch holds entries and nothing else.
    auto entries = make_entries(in, in.ConsumeBool() ? 3 : 0);
    const auto slot = in.ConsumeIntegral<std::uint16_t>();
    if (!entries.empty()) {
      b.content = store::unique_content{.entries = std::move(entries), .slot = slot};
      continue;
    }
    b.rows.resize(in.ConsumeIntegralInRange<std::size_t>(0, 4));
    for (auto& r : b.rows) {
      r.record_type = in.ConsumeIntegral<std::uint32_t>();
      r.record_id = in.ConsumeIntegral<std::uint64_t>();
      r.slot = in.ConsumeIntegral<std::uint16_t>();
      r.delta = in.ConsumeIntegral<std::int64_t>() >> 8;  // sums of a few never overflow
    }
  }
  return out;
}

void written_log(FuzzedDataProvider& in) {
  // A segment as the log writes it: the magic, then records.
  std::string log(durable::segment_magic);
  std::vector<std::size_t> boundaries{log.size()};
  std::vector<std::pair<store::counter_key, std::int64_t>> model_log;
  std::vector<store::flush_batch> model_batches;
  std::vector<store::unique_entry> model_uniques;  // pending, as logged
  const std::size_t records = in.ConsumeIntegralInRange<std::size_t>(0, 8);
  for (std::size_t i = 0; i < records && in.remaining_bytes() > 0; ++i) {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {
        std::vector<ingest::increment> incs(in.ConsumeIntegralInRange<std::size_t>(0, 6));
        for (auto& inc : incs) {
          inc.record_type = in.ConsumeIntegral<std::uint32_t>();
          inc.record_id = in.ConsumeIntegral<std::uint64_t>();
          inc.delta = in.ConsumeIntegral<std::int32_t>();
          model_log.push_back({{inc.record_type, inc.record_id}, inc.delta});
        }
        const auto entries = make_entries(in, 3);
        durable::append_increments(log, incs, entries);
        model_uniques.insert(model_uniques.end(), entries.begin(), entries.end());
        break;
      }
      case 1: {
        auto batches = make_batches(in);
        durable::append_batches(log, batches);
        model_log.clear();
        model_uniques.clear();
        for (auto& b : batches) model_batches.push_back(std::move(b));
        break;
      }
      case 2: {
        auto batches = make_batches(in);
        std::vector<store::pending_delta> deltas(in.ConsumeIntegralInRange<std::size_t>(0, 6));
        for (auto& d : deltas) {
          d.key = {in.ConsumeIntegral<std::uint32_t>(), in.ConsumeIntegral<std::uint64_t>()};
          d.delta = in.ConsumeIntegral<std::int64_t>() >> 8;
        }
        auto entries = make_entries(in, 3);
        durable::append_snapshot(log, batches, deltas, {}, entries);
        model_uniques = std::move(entries);
        model_batches = std::move(batches);
        model_log.clear();
        for (const auto& d : deltas) model_log.push_back({d.key, d.delta});
        break;
      }
      default:
        durable::append_committed(log);
        model_batches.clear();
        break;
    }
    boundaries.push_back(log.size());
  }

  durable::replay_state state;
  const auto whole = durable::scan_segment(log, state);
  if (whole.outcome != durable::scan_result::status::ok || whole.valid_bytes != log.size())
    fail("a log written by append_* does not replay clean");
  std::vector<store::pending_delta> expected;
  for (const auto& [key, delta] : model_log) expected.push_back({key, delta});
  if (summed(state.deltas()) != summed(expected)) fail("replayed deltas differ from the records");
  if (!same_batches(state.batches(), model_batches))
    fail("replayed batches differ from the records");
  if (state.uniques() != model_uniques) fail("replayed unique entries differ from the records");

  // An append interrupted anywhere: the whole records before the cut survive.
  // (A segment is created with its magic before any record is appended.)
  const std::size_t cut = in.ConsumeIntegralInRange<std::size_t>(boundaries.front(), log.size());
  std::size_t last_whole = 0;
  for (const auto b : boundaries) {
    if (b <= cut) last_whole = b;
  }
  durable::replay_state cut_state;
  const auto torn = durable::scan_segment(std::string_view(log).substr(0, cut), cut_state);
  if (torn.outcome == durable::scan_result::status::corrupt)
    fail("an interrupted append reads as corruption");
  if (torn.valid_bytes != last_whole) fail("an interrupted append lost whole records");
  if ((torn.outcome == durable::scan_result::status::ok) != (cut == last_whole))
    fail("a cut inside a record is not a torn tail");
}

void recovered_dir(std::string_view data) {
  // A scratch directory per process, in memory where possible, removed at exit.
  static const struct scratch {
    std::string path;
    scratch() {
      const char* base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
      path = std::string(base) + "/slotted-wal-fuzz-" + std::to_string(::getpid());
    }
    ~scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } scratch_dir;
  const std::string& dir = scratch_dir.path;
  static metrics::registry metrics;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Up to two segments: the first byte says where the first one ends.
  std::size_t split = data.empty() ? 0 : static_cast<unsigned char>(data[0]) * data.size() / 256;
  if (!data.empty()) data.remove_prefix(1), split = std::min(split, data.size());
  const auto write = [&](const char* name, std::string_view bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), bytes.size());
  };
  write("wal-0000000000000001.log", data.substr(0, split));
  if (split < data.size()) write("wal-0000000000000002.log", data.substr(split));
  config::wal_config cfg;
  cfg.dir = dir;
  try {
    durable::daemon_log log_owner(cfg, metrics);
    wal::write_ahead_log& log = log_owner.log();
    (void)durable::recover(log);
  } catch (const wal::wal_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      raw_segment(rest);
      break;
    case 1: {
      FuzzedDataProvider in(data + 1, size - 1);
      written_log(in);
      break;
    }
    default:
      recovered_dir(rest);
      break;
  }
  return 0;
}

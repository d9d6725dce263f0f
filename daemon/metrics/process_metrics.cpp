#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "metrics/metrics.hpp"

namespace slotted::metrics {

namespace {
prometheus::MetricFamily gauge_family(const char* name, const char* help, double value,
                                      prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(m);
  return f;
}

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    if (n > 0) --n;  // the descriptor opendir itself holds
  }
  return n;
}
}  // namespace

std::vector<prometheus::MetricFamily> collect_process_metrics() {
  std::vector<prometheus::MetricFamily> out;
  std::ifstream stat_file("/proc/self/stat");
  std::string stat;
  std::getline(stat_file, stat);
  // Fields after the parenthesised command name, which may itself hold spaces.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream fields(stat.substr(close + 2));
  std::string f[24];
  for (auto& x : f) fields >> x;
  // f[0] is field 3 (state); utime=14, stime=15, starttime=22, vsize=23, rss=24.
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double utime = std::stod(f[11]), stime = std::stod(f[12]);
  const double start = std::stod(f[19]);
  const double vsize = std::stod(f[20]), rss = std::stod(f[21]);
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);

  out.push_back(gauge_family("process_cpu_seconds_total",
                             "Total user and system CPU time spent in seconds.",
                             (utime + stime) / ticks, prometheus::MetricType::Counter));
  out.push_back(
      gauge_family("process_resident_memory_bytes", "Resident memory size in bytes.", rss * page));
  out.push_back(
      gauge_family("process_virtual_memory_bytes", "Virtual memory size in bytes.", vsize));
  out.push_back(gauge_family("process_open_fds", "Number of open file descriptors.",
                             static_cast<double>(open_fds())));
  out.push_back(gauge_family("process_max_fds", "Maximum number of open file descriptors.",
                             static_cast<double>(lim.rlim_cur)));
  out.push_back(gauge_family("process_start_time_seconds",
                             "Start time of the process since unix epoch in seconds.",
                             boot_time_seconds() + start / ticks));
  return out;
}

}  // namespace slotted::metrics

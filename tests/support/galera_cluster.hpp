#pragma once
// A throwaway Galera cluster (MariaDB + galera-4) on loopback for tests and the
// benchmark: N nodes, each with its own --defaults-file (the SST script reads its
// settings from it), its own free ports (client, group communication, IST, SST), and
// its own process group (SST runs rsync in mariadbd's group, so the whole group is
// stopped). Node 0 bootstraps the cluster (--wsrep-new-cluster); the others join it by
// rsync SST. As root the nodes run as `mysql` (rsync SST refuses root) with their
// directories owned by it; otherwise as the calling user.
//
// Failure detection is shortened (evs.suspect_timeout=PT3S, evs.inactive_timeout=PT6S)
// so that the survivors stop waiting for a killed node within seconds.
// Everything is removed in the destructor; nodes die with the test process.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "db/connection.hpp"

namespace slotted::test {

class galera_cluster {
 public:
  // Brings up `nodes` nodes, each Synced on return; throws std::runtime_error.
  explicit galera_cluster(int nodes = 3);
  ~galera_cluster();
  galera_cluster(const galera_cluster&) = delete;
  galera_cluster& operator=(const galera_cluster&) = delete;

  int size() const { return static_cast<int>(nodes_.size()); }
  std::uint16_t port(int node) const { return nodes_[node].port; }
  const std::string& socket(int node) const { return nodes_[node].socket; }
  bool running(int node) const { return nodes_[node].pid > 0; }

  // Over the node's unix socket, as root, with causal reads (wsrep_sync_wait=1), so
  // a read sees everything the cluster committed before it.
  db::connection connect(int node, const std::string& database = "") const;
  std::int64_t query_int(int node, const std::string& database, const std::string& sql) const;
  // wsrep_local_state is 4 (Synced) and wsrep_ready ON.
  bool synced(int node) const;
  std::int64_t status(int node, const std::string& variable) const;

  // SIGKILLs the node's process group and reaps it.
  void kill(int node);
  // Restarts a killed node so that it rejoins by IST: `mariadbd --wsrep-recover` reads
  // the position InnoDB holds, then the node starts with --wsrep-start-position (a
  // plain restart after SIGKILL would ask for a full SST). Waits until it is Synced.
  void restart(int node);

 private:
  struct node {
    std::string dir;
    std::string socket;
    std::uint16_t port = 0;
    pid_t pid = -1;
  };
  void start_node(int node, const std::vector<std::string>& extra);
  void wait_synced(int node, std::chrono::seconds limit);

  std::string dir_;
  std::vector<node> nodes_;
};

}  // namespace slotted::test

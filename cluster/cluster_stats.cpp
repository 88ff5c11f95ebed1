#include "cluster/cluster_stats.hpp"

namespace scg::cluster {

void cluster_stats::render(core::prometheus_writer& w) const {
  SCG_CLUSTER_COUNTERS(SCG_STAT_COUNTER)
  core::render_histogram(w, "cluster_replication_delay_seconds",
                         "Time from a write at its replica to its arrival here, for entries pushed as deltas",
                         replication_delay, replication_bounds_us);
  core::render_histogram(w, "cluster_refresh_pass_seconds",
                         "Time of one refresh pass of the cluster actor over its table (touch bindings in use, expire "
                         "the rest)",
                         refresh_pass, core::decision_bounds_us);
}

cluster_stats& global_cluster_stats() {
  static cluster_stats s;
  return s;
}

}  // namespace scg::cluster

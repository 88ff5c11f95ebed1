#pragma once
// The cluster's own metrics (scg_cluster_*): counters of what replicas said
// to each other, and the replication and refresh histograms.

#include <array>
#include <atomic>
#include <cstdint>

#include "core/metrics.hpp"

namespace scg::cluster {

#define SCG_CLUSTER_COUNTERS(X) \
  X(cluster_entries_merged_total, "Replicated entries from peers that changed this replica") \
  X(cluster_conflicts_total, "Concurrent decisions for one key that named different backends") \
  X(cluster_entries_expired_total, "Replicated bindings deleted after a ttl unused on every replica") \
  X(cluster_duplicate_names_total, "Peers refused: another replica uses this replica's node_name") \
  X(cluster_protocol_refused_total, "Peers refused: they speak no cluster protocol version this replica speaks") \
  X(cluster_messages_dropped_total, "Peer messages dropped: of another scg version, or malformed (unexpected_message, digest_refused)") \
  X(cluster_connections_refused_total, "Connections to the plain-TCP cluster port closed by its guard: a frame CAF would crash on or reserve too much for, or over 256 at once") \
  X(cluster_one_way_greetings_total, "Members greeted because they sent replication to this replica while it counted them down (a one-way split mended)") \
  X(cluster_handoffs_total, "Members back up after a partition or freeze sent the writes made here meanwhile (hinted handoff)") \
  X(cluster_handoff_fallbacks_total, "Members back up repaired by digest alone: the write log no longer reached back to when they were last heard") \
  X(cluster_repair_entries_sent_total, "Entries sent to peers in digest repairs and handoffs (not in deltas)")

struct cluster_stats {
  SCG_CLUSTER_COUNTERS(SCG_STAT_FIELD)

  /// Time from a write at its replica to its arrival here, for entries pushed
  /// as deltas (scg_cluster_replication_delay_seconds). Versions carry
  /// milliseconds, so values are exact to about 1 ms.
  static constexpr std::array<std::uint64_t, 14> replication_bounds_us{
      1000, 2000, 3000, 4000, 5000, 7500, 10000, 15000, 25000, 50000, 100000, 250000, 1000000, 5000000};
  core::histogram<replication_bounds_us.size()> replication_delay{};
  /// How long each pass of the cluster actor over its table took
  /// (scg_cluster_refresh_pass_seconds: touching bindings in use, expiring
  /// abandoned ones).
  core::histogram<core::decision_bounds_us.size()> refresh_pass{};

  void render(core::prometheus_writer& w) const;
};

/// The process's.
cluster_stats& global_cluster_stats();

}  // namespace scg::cluster

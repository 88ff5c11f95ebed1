#pragma once
// The data path's own metrics: calls forwarded (scg_forward_rpcs_total and
// durations by method, bytes, active calls), client connections (scg_conn_*),
// keepalive, buffers, redactions and span export. What scg answers itself is
// counted by the local-reply table (core/metrics.hpp).

#include <array>
#include <atomic>
#include <cstdint>

#include "core/metrics.hpp"
#include "core/rpc.hpp"

namespace scg::net {

#define SCG_NET_COUNTERS(X) \
  X(forward_request_bytes_total, "Message bytes forwarded from clients to backends") \
  X(forward_response_bytes_total, "Message bytes forwarded from backends to clients") \
  X(config_redactions_total, "Config responses with spark.connect.authenticate.token redacted") \
  X(tracing_spans_exported_total, "Spans the OTLP collector accepted") \
  X(tracing_spans_dropped_total, "Spans dropped: the export queue was full, or at shutdown") \
  X(tracing_export_failures_total, "Spans lost: the OTLP collector failed or could not be reached") \
  X(conn_refused_total, "Client connections closed at accept: limits.max_client_connections open, none still in its handshake") \
  X(conn_evicted_total, "Client connections closed in their handshake to make room for a new one (limits.max_client_connections)") \
  X(conn_accept_errors_total, "accept() failures (EMFILE, ENFILE, ENOMEM...); the accept loop pauses 100 ms") \
  X(conn_handshake_timeouts_total, "Client connections closed: no TLS handshake or HTTP/2 preface within limits.handshake_timeout_secs") \
  X(conn_protocol_errors_total, "Client connections ended by a GOAWAY for the client's HTTP/2 protocol error (the log names it)") \
  X(conn_idle_closed_total, "Client connections told to go away after limits.idle_connection_secs without streams") \
  X(keepalive_client_pings_total, "Keepalive PINGs sent on quiet client connections") \
  X(keepalive_backend_pings_total, "Keepalive PINGs sent on quiet backend connections with calls open") \
  X(keepalive_client_timeouts_total, "Client connections closed: a keepalive PING went unanswered for keepalive.timeout_secs") \
  X(keepalive_backend_timeouts_total, "Backend connections closed, their calls UNAVAILABLE: a keepalive PING went unanswered") \
  X(buffer_compacted_bytes_total, "Bytes of waiting calls copied out of shared read buffers under buffer pressure") \
  X(replays_total, "Sessions replayed onto a new server after theirs was lost (on_backend_lost.action: replay)") \
  X(replay_entries_total, "Journal entries run by replays") \
  X(replay_skipped_entries_total, "Optional journal entries a new server refused in a replay (USE of a database it lacks)") \
  X(journals_swept_total, "Journals dropped because their session is no longer bound (expired or released elsewhere)")

#define SCG_NET_GAUGES(X) \
  X(forward_active_calls, "Calls being forwarded now") \
  X(forward_active_streams, "Streaming calls (ExecutePlan, ReattachExecute, AddArtifacts, unknown methods) being forwarded now") \
  X(client_connections, "Client connections open (TLS handshakes included)") \
  X(buffered_bytes, "Bytes of read buffers and queued call data the workers hold (bounded by limits.buffer_mib)") \
  X(journal_bytes, "Bytes of session journals this replica holds (on_backend_lost.max_journal_total_mib)") \
  X(journal_sessions, "Sessions with a journal (or an unreplayable mark) on this replica") \
  X(spool_bytes, "Bytes of artifacts spooled to disk for replay (on_backend_lost.max_spool_mib)")

struct net_stats {
  SCG_NET_COUNTERS(SCG_STAT_FIELD)
  SCG_NET_GAUGES(SCG_STAT_FIELD)

  /// Finished calls by rpc and status code (scg_forward_rpcs_total).
  std::array<std::array<std::atomic<std::uint64_t>, core::status_code_count>, core::rpc_count> rpcs{};

  /// Call durations by rpc (scg_forward_rpc_duration_seconds).
  static constexpr std::array<std::uint64_t, 16> duration_bounds_us{
      500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
      1000000, 2500000, 5000000, 10000000, 60000000, 300000000};
  std::array<core::histogram<duration_bounds_us.size()>, core::rpc_count> durations{};

  void observe_duration(core::rpc r, std::uint64_t us) {
    durations[static_cast<std::size_t>(r)].observe(duration_bounds_us, us);
  }

  void count_rpc(core::rpc r, int code) {
    if (code < 0 || code >= static_cast<int>(core::status_code_count)) code = 2;  // UNKNOWN
    rpcs[static_cast<std::size_t>(r)][static_cast<std::size_t>(code)].fetch_add(1, std::memory_order_relaxed);
  }

  /// Sessions marked unreplayable, by reason (net/session_journal.hpp's enum order).
  std::array<std::atomic<std::int64_t>, 11> unreplayable_sessions{};
  /// Replay durations (scg_replay_duration_seconds).
  core::histogram<duration_bounds_us.size()> replay_durations{};

  void render(core::prometheus_writer& w) const;
};

/// The process's.
net_stats& global_net_stats();

}  // namespace scg::net

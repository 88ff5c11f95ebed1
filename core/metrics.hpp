#pragma once
// Process-wide counters and gauges, rendered as Prometheus text. Declared as
// X-macro blocks, counters first, then gauges: one line adds a metric.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/local_reply.hpp"
#include "core/rpc.hpp"

namespace scg::core {

#define SCG_COUNTERS(X)                                                                         \
  X(forward_invalid_argument_total, "Requests refused: the body is not a valid message")      \
  X(forward_unimplemented_total, "Calls to methods outside the Spark Connect service")         \
  X(forward_backend_unavailable_total, "Calls answered UNAVAILABLE: backend not reachable")   \
  X(forward_no_backend_total, "New sessions refused: no backend eligible")                    \
  X(forward_shutting_down_total, "Calls refused because the replica is draining")            \
  X(forward_request_bytes_total, "Message bytes forwarded from clients to backends")          \
  X(forward_response_bytes_total, "Message bytes forwarded from backends to clients")         \
  X(router_decisions_total, "New-session placement decisions made by this replica")           \
  X(router_sessions_expired_total, "Session bindings expired after session_ttl_secs idle")    \
  X(router_sessions_released_total, "Session bindings forgotten after ReleaseSession")        \
  X(router_operations_learned_total, "Operation ids added to the operation index")            \
  X(router_operations_found_total, "Operation ids the data path missed, found in the replicated table or at a peer") \
  X(router_operations_unsettled_total, "Calls for an operation id nobody answered for, refused while the cluster settled") \
  X(router_operations_released_total, "Operation ids removed by ReleaseExecute(release_all)") \
  X(router_operations_expired_total, "Operation ids expired after op_ttl_secs unseen")        \
  X(router_clones_bound_total, "Sessions bound to their parent's backend by CloneSession")   \
  X(router_rebinds_total, "Sessions moved off a lost backend (on_backend_lost: rebind)")    \
  X(router_sessions_found_total, "Sessions without a binding found on the server that still held them") \
  X(router_holder_searches_total, "Searches for a session's server: a ReattachExecute to every healthy server (nobody asked knew the session)") \
  X(router_owner_lookups_total, "Sessions a server may hold, missed here, asked of their key's owner before any search") \
  X(router_owner_lookups_failed_total, "Owner lookups unanswered (time-out, or a peer that predates them): the servers were searched") \
  X(forward_backend_lost_total, "Calls refused: their backend is lost (on_backend_lost: fail)") \
  X(router_owner_unreachable_total, "New sessions decided locally: the key's owner did not answer") \
  X(router_owner_asked_again_total, "New sessions whose owner was asked again: this replica was frozen past the ask's time-out") \
  X(router_decisions_confirmed_total, "Owners' decisions this replica wrote itself: the owner's write had not arrived 200 ms after its answer") \
  X(router_late_bindings_total, "Bindings a peer named after the session was released here: used for the call, not kept") \
  X(cluster_entries_merged_total, "Replicated entries from peers that changed this replica")     \
  X(cluster_conflicts_total, "Concurrent decisions for one key that named different backends") \
  X(cluster_entries_expired_total, "Replicated bindings deleted after a ttl unused on every replica") \
  X(cluster_duplicate_names_total, "Peers refused: another replica uses this replica's node_name") \
  X(cluster_protocol_refused_total, "Peers refused: they speak no cluster protocol version this replica speaks") \
  X(cluster_messages_dropped_total, "Peer messages dropped: of another scg version, or malformed (unexpected_message, digest_refused)") \
  X(cluster_connections_refused_total, "Connections to the plain-TCP cluster port closed by its guard: a frame CAF would crash on or reserve too much for, or over 256 at once") \
  X(cluster_one_way_greetings_total, "Members greeted because they sent replication to this replica while it counted them down (a one-way split mended)") \
  X(cluster_handoffs_total, "Members back up after a partition or freeze sent the writes made here meanwhile (hinted handoff)") \
  X(cluster_handoff_fallbacks_total, "Members back up repaired by digest alone: the write log no longer reached back to when they were last heard") \
  X(cluster_repair_entries_sent_total, "Entries sent to peers in digest repairs and handoffs (not in deltas)") \
  X(config_reloads_total, "Backend-set reloads applied (SIGHUP)")                                 \
  X(config_reload_failures_total, "Reloads refused: the file did not parse; the running set kept") \
  X(backend_resolve_failures_total, "Re-resolutions of a resolve: all backend name that failed")   \
  X(backends_added_total, "Backends added to the running set (reload or DNS)")                   \
  X(backends_removed_total, "Backends taken out of the running set (reload or DNS)")            \
  X(router_sessions_refused_total, "New sessions refused: the tenant is at limits.max_sessions")  \
  X(router_sessions_shed_total, "New sessions shed: every backend scored above placement.shed_above") \
  X(auth_failures_total, "Calls refused UNAUTHENTICATED")                                        \
  X(rate_limited_total, "Calls refused RESOURCE_EXHAUSTED by rate_limits")                       \
  X(executions_refused_total, "Executions refused: the tenant is at limits.max_executions")      \
  X(executions_killed_total, "Executions interrupted at limits.max_execution_secs")              \
  X(executions_reattach_refused_total, "Reattaches refused: scg ended their operation at max_execution_secs") \
  X(forward_oversized_total, "Calls ended RESOURCE_EXHAUSTED: a message over limits.max_message_bytes, either way") \
  X(config_redactions_total, "Config responses with spark.connect.authenticate.token redacted")   \
  X(tracing_spans_exported_total, "Spans the OTLP collector accepted")                            \
  X(tracing_spans_dropped_total, "Spans dropped: the export queue was full, or at shutdown")      \
  X(tracing_export_failures_total, "Spans lost: the OTLP collector failed or could not be reached") \
  X(conn_refused_total, "Client connections closed at accept: limits.max_client_connections open, none still in its handshake") \
  X(conn_evicted_total, "Client connections closed in their handshake to make room for a new one (limits.max_client_connections)") \
  X(conn_accept_errors_total, "accept() failures (EMFILE, ENFILE, ENOMEM...); the accept loop pauses 100 ms") \
  X(conn_handshake_timeouts_total, "Client connections closed: no TLS handshake or HTTP/2 preface within limits.handshake_timeout_secs") \
  X(conn_protocol_errors_total, "Client connections ended by a GOAWAY for the client's HTTP/2 protocol error (the log names it)") \
  X(conn_idle_closed_total, "Client connections told to go away after limits.idle_connection_secs without streams") \
  X(keepalive_client_pings_total, "Keepalive PINGs sent on quiet client connections")         \
  X(keepalive_backend_pings_total, "Keepalive PINGs sent on quiet backend connections with calls open") \
  X(keepalive_client_timeouts_total, "Client connections closed: a keepalive PING went unanswered for keepalive.timeout_secs") \
  X(keepalive_backend_timeouts_total, "Backend connections closed, their calls UNAVAILABLE: a keepalive PING went unanswered") \
  X(forward_first_message_timeouts_total, "Calls ended DEADLINE_EXCEEDED: the first request message took over limits.first_message_secs") \
  X(buffer_shed_total, "Calls ended RESOURCE_EXHAUSTED: their worker held more than its share of limits.buffer_mib, they the most") \
  X(buffer_compacted_bytes_total, "Bytes of waiting calls copied out of shared read buffers under buffer pressure") \
  X(forward_backend_broke_off_total, "Calls ended UNAVAILABLE: the backend's connection failed during the call") \
  X(forward_backend_resets_total, "Calls ended by the backend's RST_STREAM (code by the reset's HTTP/2 error)") \
  X(forward_backend_bad_status_total, "Calls ended INTERNAL: the backend sent no grpc-status, or not a status code") \
  X(forward_deadline_exceeded_total, "Calls ended DEADLINE_EXCEEDED by scg at the client's grpc-timeout")

#define SCG_GAUGES(X)                                  \
  X(forward_active_calls, "Calls being forwarded now") \
  X(forward_active_streams, "Streaming calls (ExecutePlan, ReattachExecute, AddArtifacts, unknown methods) being forwarded now") \
  X(session_actors, "Session actors running: sessions of this replica with live operations (idle ones have none)") \
  X(client_connections, "Client connections open (TLS handshakes included)")                     \
  X(buffered_bytes, "Bytes of read buffers and queued call data the workers hold (bounded by limits.buffer_mib)")

/// The gRPC status codes 0..16, by name as Prometheus labels show them.
inline constexpr std::size_t status_code_count = 17;
const char* status_code_name(int code);

/// A Prometheus histogram of microsecond values over fixed upper bounds
/// (`bounds`, ascending, passed by its owner): counts per bucket, not
/// cumulative (render() makes them so), and the sum.
template <std::size_t N>
struct histogram {
  std::array<std::atomic<std::uint64_t>, N + 1> counts{};  // the last: above every bound
  std::atomic<std::uint64_t> sum_us{0};

  void observe(const std::array<std::uint64_t, N>& bounds, std::uint64_t us) {
    std::size_t b = 0;
    while (b < N && us > bounds[b]) ++b;
    counts[b].fetch_add(1, std::memory_order_relaxed);
    sum_us.fetch_add(us, std::memory_order_relaxed);
  }

  /// Appends the _bucket, _sum and _count series of `name` (with the label
  /// pairs `labels`, e.g. `rpc="Config"`, or none); nothing while empty and
  /// `skip_empty`.
  void render(std::string& out, const std::string& name, const std::string& labels,
              const std::array<std::uint64_t, N>& bounds, bool skip_empty) const;
};

/// All of scg's own metrics. One instance per process: global_metrics().
struct metrics {
#define SCG_DECLARE(name, help) std::atomic<std::uint64_t> name{0};
  SCG_COUNTERS(SCG_DECLARE)
  SCG_GAUGES(SCG_DECLARE)
#undef SCG_DECLARE
  /// Calls scg answered itself, by reason (scg_local_replies_total; core/local_reply.hpp).
  std::array<std::atomic<std::uint64_t>, local_reason_count> local_replies{};

  /// Finished calls by rpc and status code (scg_forward_rpcs_total).
  std::array<std::array<std::atomic<std::uint64_t>, status_code_count>, rpc_count> rpcs{};

  /// Call durations by rpc (scg_forward_rpc_duration_seconds).
  static constexpr std::array<std::uint64_t, 16> duration_bounds_us{
      500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
      1000000, 2500000, 5000000, 10000000, 60000000, 300000000};
  std::array<histogram<duration_bounds_us.size()>, rpc_count> durations{};

  /// Time from a write at its replica to its arrival here, for entries pushed
  /// as deltas (scg_cluster_replication_delay_seconds). Versions carry
  /// milliseconds, so values are exact to about 1 ms.
  static constexpr std::array<std::uint64_t, 14> replication_bounds_us{
      1000, 2000, 3000, 4000, 5000, 7500, 10000, 15000, 25000, 50000, 100000, 250000, 1000000, 5000000};
  histogram<replication_bounds_us.size()> replication_delay{};

  /// How long a call waited for the router's placement of a new or rebound
  /// session, from the ask to the answer on its worker
  /// (scg_router_decision_seconds); and how long each pass of the cluster
  /// actor over its table took (scg_cluster_refresh_pass_seconds: touching
  /// bindings in use, expiring abandoned ones); and, of the decisions, how
  /// long the key's owner took to answer `decide` (or the ask to time out:
  /// scg_router_owner_answer_seconds).
  /// Half-millisecond steps up to 5 ms: the aim of a decision's p99 (5 ms)
  /// falls inside them, so a quantile is read to within 0.5 ms.
  static constexpr std::array<std::uint64_t, 22> decision_bounds_us{
      100,   250,   500,   1000,  1500,   2000,   2500,   3000,    3500,    4000,    4500,
      5000,  7500,  10000, 25000, 50000,  100000, 250000, 1000000, 2500000, 5000000, 10000000};
  histogram<decision_bounds_us.size()> router_decision{};
  histogram<decision_bounds_us.size()> refresh_pass{};
  histogram<decision_bounds_us.size()> owner_answer{};

  void observe_duration(rpc r, std::uint64_t us) {
    durations[static_cast<std::size_t>(r)].observe(duration_bounds_us, us);
  }

  void count_rpc(rpc r, int code) {
    if (code < 0 || code >= static_cast<int>(status_code_count)) code = 2;  // UNKNOWN
    rpcs[static_cast<std::size_t>(r)][static_cast<std::size_t>(code)].fetch_add(
        1, std::memory_order_relaxed);
  }

  /// Appends every metric in Prometheus text format to `out`.
  void render(std::string& out) const;
};

/// The process's metrics.
metrics& global_metrics();

/// Adds `v` to a counter (relaxed: counters order nothing).
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t v = 1) {
  c.fetch_add(v, std::memory_order_relaxed);
}

}  // namespace scg::core

#pragma once
// Process-wide counters and gauges, rendered as Prometheus text. Declared as
// X-macro blocks, counters first, then gauges: one line adds a metric. The
// data path's, the router's and the cluster's own live beside their code
// (net/net_stats.hpp, actors/router_stats.hpp, cluster/cluster_stats.hpp).

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/local_reply.hpp"
#include "core/prometheus.hpp"
#include "core/rpc.hpp"

namespace scg::core {

#define SCG_COUNTERS(X)                                                                         \
  X(forward_invalid_argument_total, "Requests refused: the body is not a valid message") \
  X(forward_unimplemented_total, "Calls to methods outside the Spark Connect service") \
  X(forward_backend_unavailable_total, "Calls answered UNAVAILABLE: backend not reachable") \
  X(forward_no_backend_total, "New sessions refused: no backend eligible") \
  X(forward_shutting_down_total, "Calls refused because the replica is draining") \
  X(router_operations_unsettled_total, "Calls for an operation id nobody answered for, refused while the cluster settled") \
  X(forward_backend_lost_total, "Calls refused: their backend is lost (on_backend_lost: fail)") \
  X(forward_operations_lost_total, "Calls for an operation that died with its lost backend (on_backend_lost: replay)") \
  X(replays_failed_total, "Replays that failed part way: the call failed, naming what, and the session went on unreplayed") \
  X(replays_refused_total, "Lost sessions whose journal could not be replayed (scg_sessions_unreplayable says why)") \
  X(router_route_timeouts_total, "Routed calls the router did not answer within its routing deadline (30 s)") \
  X(config_reloads_total, "Backend-set reloads applied (SIGHUP)") \
  X(config_reload_failures_total, "Reloads refused: the file did not parse; the running set kept") \
  X(backend_resolve_failures_total, "Re-resolutions of a resolve: all backend name that failed") \
  X(backends_added_total, "Backends added to the running set (reload or DNS)") \
  X(backends_removed_total, "Backends taken out of the running set (reload or DNS)") \
  X(router_sessions_refused_total, "New sessions refused: the tenant is at limits.max_sessions") \
  X(router_sessions_shed_total, "New sessions shed: every backend scored above placement.shed_above") \
  X(auth_failures_total, "Calls refused UNAUTHENTICATED") \
  X(rate_limited_total, "Calls refused RESOURCE_EXHAUSTED by rate_limits") \
  X(executions_refused_total, "Executions refused: the tenant is at limits.max_executions") \
  X(executions_killed_total, "Executions interrupted at limits.max_execution_secs") \
  X(executions_reattach_refused_total, "Reattaches refused: scg ended their operation at max_execution_secs") \
  X(forward_oversized_total, "Calls ended RESOURCE_EXHAUSTED: a message over limits.max_message_bytes, either way") \
  X(forward_first_message_timeouts_total, "Calls ended DEADLINE_EXCEEDED: the first request message took over limits.first_message_secs") \
  X(buffer_shed_total, "Calls ended RESOURCE_EXHAUSTED: their worker held more than its share of limits.buffer_mib, they the most") \
  X(forward_backend_broke_off_total, "Calls ended UNAVAILABLE: the backend's connection failed during the call") \
  X(forward_backend_resets_total, "Calls ended by the backend's RST_STREAM (code by the reset's HTTP/2 error)") \
  X(forward_backend_bad_status_total, "Calls ended INTERNAL: the backend sent no grpc-status, or not a status code") \
  X(forward_deadline_exceeded_total, "Calls ended DEADLINE_EXCEEDED by scg at the client's grpc-timeout")


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

  /// Appends the _bucket, _sum and _count series to the family `w` last
  /// started, with the label `extra` (e.g. {"rpc", "Config"}) unless its name
  /// is empty; nothing while empty and `skip_empty`.
  void render(prometheus_writer& w, prometheus_writer::label extra, const std::array<std::uint64_t, N>& bounds,
              bool skip_empty) const;
};

template <std::size_t N>
inline void histogram<N>::render(prometheus_writer& w, prometheus_writer::label extra,
                                 const std::array<std::uint64_t, N>& bounds, bool skip_empty) const {
  std::uint64_t total = 0;
  for (const auto& c : counts) total += c.load(std::memory_order_relaxed);
  if (total == 0 && skip_empty) return;
  std::vector<prometheus_writer::label> ls;
  if (!extra.first.empty()) ls.push_back(extra);
  const auto plain = ls;
  ls.emplace_back("le", "");
  std::uint64_t running = 0;
  for (std::size_t b = 0; b <= N; ++b) {
    running += counts[b].load(std::memory_order_relaxed);
    const std::string le = b < N ? std::to_string(static_cast<double>(bounds[b]) / 1e6) : std::string("+Inf");
    ls.back().second = le;
    w.series("_bucket", ls, std::to_string(running));
  }
  w.series("_sum", plain, std::to_string(static_cast<double>(sum_us.load(std::memory_order_relaxed)) / 1e6));
  w.series("_count", plain, std::to_string(running));
}

/// A histogram without labels as its own family.
template <std::size_t N>
void render_histogram(prometheus_writer& w, std::string_view name, std::string_view help, const histogram<N>& h,
                      const std::array<std::uint64_t, N>& bounds) {
  w.family(name, help, "histogram");
  h.render(w, {}, bounds, false);
}

/// Bounds of the placement-time histograms (the router's, the cluster's
/// refresh pass): half-millisecond steps up to 5 ms, where the aim of a
/// decision's p99 (5 ms) falls, so a quantile is read to within 0.5 ms.
inline constexpr std::array<std::uint64_t, 22> decision_bounds_us{
    100,  250,   500,   1000,  1500,  2000,   2500,   3000,    3500,    4000,    4500,
    5000, 7500,  10000, 25000, 50000, 100000, 250000, 1000000, 2500000, 5000000, 10000000};

// A component's own counters and gauges live beside its code, declared from
// an X-macro list of (name, help) as these are (cluster/cluster_stats.hpp,
// net/net_stats.hpp, actors/router_stats.hpp); its render(w) writes them
// with these, and admin/admin_http.cpp's /metrics renders every block.
#define SCG_STAT_FIELD(name, help) std::atomic<std::uint64_t> name{0};
#define SCG_STAT_COUNTER(name, help) w.family(#name, help, "counter").sample(name.load(std::memory_order_relaxed));
#define SCG_STAT_GAUGE(name, help) w.family(#name, help, "gauge").sample(name.load(std::memory_order_relaxed));

/// The process's own metrics, and those the local-reply table counts
/// (core/local_reply.hpp). One instance per process: global_metrics().
struct metrics {
#define SCG_DECLARE(name, help) std::atomic<std::uint64_t> name{0};
  SCG_COUNTERS(SCG_DECLARE)
#undef SCG_DECLARE
  /// Calls scg answered itself, by reason (scg_local_replies_total; core/local_reply.hpp).
  std::array<std::atomic<std::uint64_t>, local_reason_count> local_replies{};


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

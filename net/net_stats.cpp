#include "net/net_stats.hpp"

#include "net/session_journal.hpp"

namespace scg::net {

void net_stats::render(core::prometheus_writer& w) const {
  SCG_NET_COUNTERS(SCG_STAT_COUNTER)
  SCG_NET_GAUGES(SCG_STAT_GAUGE)
  w.family("forward_rpcs_total", "Finished calls by Spark Connect method and status code", "counter");
  for (std::size_t r = 0; r < core::rpc_count; ++r)
    for (std::size_t c = 0; c < core::status_code_count; ++c)
      if (auto n = rpcs[r][c].load(std::memory_order_relaxed))
        w.sample({{"rpc", core::rpc_name(static_cast<core::rpc>(r))}, {"code", core::status_code_name(static_cast<int>(c))}},
                 n);
  w.family("forward_rpc_duration_seconds", "Time from a call's arrival to its end, by Spark Connect method", "histogram");
  for (std::size_t r = 0; r < core::rpc_count; ++r)  // a method never called adds no series
    durations[r].render(w, {"rpc", core::rpc_name(static_cast<core::rpc>(r))}, duration_bounds_us, true);
  w.family("sessions_unreplayable", "Sessions whose journal cannot be replayed, by reason", "gauge");
  for (std::size_t u = 1; u < unreplayable_sessions.size(); ++u)
    w.sample({{"reason", unreplayable_name(static_cast<unreplayable>(u))}},
             static_cast<std::uint64_t>(std::max<std::int64_t>(0, unreplayable_sessions[u].load())));
  core::render_histogram(w, "replay_duration_seconds", "Time a replay took, from its start to the call going on",
                         replay_durations, duration_bounds_us);
}

net_stats& global_net_stats() {
  static net_stats s;
  return s;
}

}  // namespace scg::net

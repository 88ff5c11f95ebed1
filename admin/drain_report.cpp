#include "admin/drain_report.hpp"

#include <algorithm>

namespace scg::admin {

actors::activity local_activity(const actors::backend_list& backends, const actors::session_table& table,
                                const net::execution_ledger& executions, actors::backend_index b, std::int64_t idle_ms) {
  actors::activity a;
  const auto now = core::now_ms();
  for (const auto& op : executions.live_ops(now - idle_ms))
    if (table.op_backend(op) == b) ++a.live_operations;
  a.calls_in_flight = static_cast<std::size_t>(std::max<std::int64_t>(0, backends[b]->in_flight.load()));
  auto [recent, newest] = table.recent_sessions(b, now - idle_ms);
  a.active_sessions = recent;
  // A call or execution under way is activity now; otherwise the newest use.
  if (a.calls_in_flight > 0 || a.live_operations > 0)
    a.last_activity_wall_ms = core::wall_now_ms();
  else if (newest > 0)
    a.last_activity_wall_ms = core::wall_of(newest);
  return a;
}

actors::drain_status drain_status_of(const actors::backend_list& backends, const actors::session_table& table,
                                     const net::execution_ledger& executions, const cluster::cluster_view* cluster,
                                     actors::backend_index b, std::int64_t idle_ms) {
  const auto& backend = *backends[b];
  const bool draining = backend.draining.load();
  // Counting sessions is a pass over the table: only for drained backends.
  const auto local = draining ? local_activity(backends, table, executions, b, idle_ms) : actors::activity{};
  std::vector<actors::peer_report> peers;
  if (draining && cluster) {
    const auto reports = backend.peer_reports();
    for (const auto& m : cluster->members()) {
      if (m.status == "self") continue;
      actors::peer_report p{m.name, m.status == "up", std::nullopt, 0};
      for (const auto& r : reports)
        if (r.node == m.name) {
          p.report = r.report;
          p.written_wall_ms = r.written_wall_ms;
        }
      peers.push_back(std::move(p));
    }
  }
  return actors::decide(draining, local, peers, core::wall_now_ms());
}

}  // namespace scg::admin

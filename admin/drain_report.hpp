#pragma once
// A drained backend's status on this replica: its own calls, executions and
// sessions (activity), with what peer replicas report (actors/drain_status).
// Used by the admin API (GET /api/v1/backends, /metrics) and by the loop
// that publishes this replica's reports (app/gateway.cpp).

#include <cstdint>

#include "actors/backend.hpp"
#include "actors/drain_status.hpp"
#include "actors/session_table.hpp"
#include "cluster/cluster_view.hpp"
#include "net/executions.hpp"

namespace scg::admin {

/// This replica's activity on backend `b`: executions of the ledger that run
/// on it (attached, or detached within `idle_ms`), calls in flight, sessions
/// bound to it and used here within `idle_ms`, and the newest of those uses.
actors::activity local_activity(const actors::backend_list& backends, const actors::session_table& table,
                                const net::execution_ledger& executions, actors::backend_index b, std::int64_t idle_ms);

/// The drain status of backend `b`: its local activity and the reports of
/// the peers `cluster` lists (null: a single replica).
actors::drain_status drain_status_of(const actors::backend_list& backends, const actors::session_table& table,
                                     const net::execution_ledger& executions, const cluster::cluster_view* cluster,
                                     actors::backend_index b, std::int64_t idle_ms);

}  // namespace scg::admin

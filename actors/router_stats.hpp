#pragma once
// The router's own metrics (scg_router_*): its placement decisions, what it
// asked other replicas, the sessions and operations it learned and forgot,
// and how long calls waited for it. What it refused a call is counted by the
// local-reply table (core/metrics.hpp).

#include <atomic>
#include <cstdint>

#include "core/metrics.hpp"

namespace scg::actors {

#define SCG_ROUTER_COUNTERS(X) \
  X(router_decisions_total, "New-session placement decisions made by this replica") \
  X(router_sessions_expired_total, "Session bindings expired after session_ttl_secs idle") \
  X(router_sessions_released_total, "Session bindings forgotten after ReleaseSession") \
  X(router_operations_learned_total, "Operation ids added to the operation index") \
  X(router_operations_found_total, "Operation ids the data path missed, found in the replicated table or at a peer") \
  X(router_operations_released_total, "Operation ids removed by ReleaseExecute(release_all)") \
  X(router_operations_expired_total, "Operation ids expired after op_ttl_secs unseen") \
  X(router_clones_bound_total, "Sessions bound to their parent's backend by CloneSession") \
  X(router_rebinds_total, "Sessions moved off a lost backend (on_backend_lost: rebind)") \
  X(router_sessions_found_total, "Sessions without a binding found on the server that still held them") \
  X(router_holder_searches_total, "Searches for a session's server: a ReattachExecute to every healthy server (nobody asked knew the session)") \
  X(router_owner_lookups_total, "Sessions a server may hold, missed here, asked of their key's owner before any search") \
  X(router_owner_lookups_failed_total, "Owner lookups unanswered (time-out, or a peer that predates them): the servers were searched") \
  X(router_owner_unreachable_total, "New sessions decided locally: the key's owner did not answer") \
  X(router_owner_asked_again_total, "New sessions whose owner was asked again: this replica was frozen past the ask's time-out") \
  X(router_decisions_confirmed_total, "Owners' decisions this replica wrote itself: the owner's write had not arrived 200 ms after its answer") \
  X(router_late_bindings_total, "Bindings a peer named after the session was released here: used for the call, not kept")

#define SCG_ROUTER_GAUGES(X) \
  X(session_actors, "Session actors running: sessions of this replica with live operations (idle ones have none)")

struct router_stats {
  SCG_ROUTER_COUNTERS(SCG_STAT_FIELD)
  SCG_ROUTER_GAUGES(SCG_STAT_FIELD)

  /// How long a call waited for the router's placement of a new or rebound
  /// session, from the ask to the answer on its worker
  /// (scg_router_decision_seconds); and, of the decisions, how long the
  /// key's owner took to answer `decide` (or the ask to time out:
  /// scg_router_owner_answer_seconds).
  core::histogram<core::decision_bounds_us.size()> router_decision{};
  core::histogram<core::decision_bounds_us.size()> owner_answer{};

  void render(core::prometheus_writer& w) const;
};

/// The process's.
router_stats& global_router_stats();

}  // namespace scg::actors

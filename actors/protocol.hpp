#pragma once
// The actor protocol: every message the router, session and backend actors
// exchange, in one place. CAF 0.17: atoms are at most 10 characters.

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "actors/backend.hpp"
#include "actors/placement.hpp"
#include "actors/router.hpp"
#include "actors/session_table.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(scg::actors::route_callback)

namespace scg::actors {

// router ← data path (through scg::actors::router)
using bind_atom = caf::atom_constant<caf::atom("bind")>;        // (key, route_callback)
                                                                // (key, route_callback, session, user, observed):
                                                                //   a session a server may still hold
using holder_atom = caf::atom_constant<caf::atom("holder")>;    // (key, int64 backend or -1): search result
using clone_atom = caf::atom_constant<caf::atom("clone")>;      // (key, backend_index, route_callback)
using rebind_atom = caf::atom_constant<caf::atom("rebind")>;    // (key, route_callback)

// router ← load poller
using owner_atom = caf::atom_constant<caf::atom("owner")>;  // (key) -> bool: this replica owns it
using load_atom = caf::atom_constant<caf::atom("load")>;    // (backend name, utilization): share it
using health_atom = caf::atom_constant<caf::atom("health")>;  // (backend name, bool healthy): share it
using op_atom = caf::atom_constant<caf::atom("op")>;            // (key, op_id): started
using op_done_atom = caf::atom_constant<caf::atom("op_done")>;  // (key, op_id): released
using release_atom = caf::atom_constant<caf::atom("release")>;  // (key): ReleaseSession
using drain_atom = caf::atom_constant<caf::atom("drain")>;      // (): no new sessions
using backend_atom = caf::atom_constant<caf::atom("backend")>;  // (name): joined the running set
                                                                // (name, bool): drain a backend

// router ← cluster actor
using forget_atom = caf::atom_constant<caf::atom("forget")>;  // (key): released on a peer
using members_atom = caf::atom_constant<caf::atom("members")>;  // (names, routers): the live members

// router → cluster actor: replicate a local write
using put_atom = caf::atom_constant<caf::atom("put")>;      // (key, backend name, session, started wall ms or 0)
using erase_atom = caf::atom_constant<caf::atom("erase")>;  // (key)

// router ↔ router of another replica (remote): the key's owner decides
using decide_atom = caf::atom_constant<caf::atom("decide")>;  // (key) -> backend name: decide a new session
                                                              // (key, backend name) -> binding in force: one made here (a clone, a found holder)

// router ← session actor
using ended_atom = caf::atom_constant<caf::atom("ended")>;  // (key): binding forgotten
using idle_atom = caf::atom_constant<caf::atom("idle")>;    // (key): no operations left, actor gone

// self-addressed timers
using expire_atom = caf::atom_constant<caf::atom("expire")>;  // router → session: idle check
using tick_atom = caf::atom_constant<caf::atom("tick")>;      // periodic work
using probe_atom = caf::atom_constant<caf::atom("probe")>;    // (bool answered): probe result

/// Settings the router needs, taken from config once.
struct router_settings {
  std::int64_t session_ttl_ms;
  std::int64_t op_ttl_ms;
  placement_policy policy;
  std::string node_name;  ///< this replica in the cluster; empty when alone
  std::optional<double> shed_above;  ///< placement.shed_above
  config::limits limits;             ///< per-tenant bulkheads (max_sessions)
  /// Backend names per tenant (tenants.pools); a tenant without one may use
  /// every backend. A `resolve: all` entry's name covers its NAME@ADDRESS backends.
  std::map<std::string, std::vector<std::string>, std::less<>> pools;
  std::function<void(std::size_t)> on_members;  ///< live replicas, self included, on each change
  std::string backend_token;   ///< what searches for a session's holder present to backends
  int search_timeout_ms = 1000;  ///< health.timeout_ms: each server's answer to a search
};

/// The session directory: places new sessions, spawns and tracks session
/// actors, expires operations.
caf::actor spawn_router(caf::actor_system& sys, router_settings settings,
                        std::shared_ptr<session_table> table, backend_list backends);

/// One session with live operations: tracks them, expires after `ttl_ms`
/// idle (checked when the router's sweep sends expire_atom). Forgets its
/// entries in `table` and tells `router` (ended_atom) when the session ends;
/// when its last operation ends it tells `router` (idle_atom) and quits, and
/// the idle session lives on as its binding in `table` and the router's
/// directory, with no actor (about 0.3 KiB instead of 1.8).
caf::actor spawn_session(caf::local_actor* parent, std::string key,
                         std::shared_ptr<session_table> table, std::int64_t ttl_ms,
                         caf::actor router);

/// One backend: watches its channel's connectivity (reachable) and, on the
/// replica that owns the backend (asked of `router`), probes it with a cheap
/// RPC every health.interval_ms and shares the verdict (healthy). The probe
/// carries `token` (scg's backend token) as a bearer token.
/// A backend that left the configured set and has no sessions on this
/// replica (`table`, at `index`) rests: no connection attempts, no probes.
caf::actor spawn_backend(caf::actor_system& sys, std::shared_ptr<backend_state> backend, backend_index index,
                         std::shared_ptr<session_table> table, const config::health& health, caf::actor router,
                         std::string token);

/// Polls a backend's Spark UI every `interval` and keeps its utilization EWMA
/// (smoothing `alpha`) in backend->utilization — on the one replica that owns
/// the backend (asked of `router`), which shares the figure with the others.
caf::actor spawn_load_poller(caf::actor_system& sys, std::shared_ptr<backend_state> backend,
                             double alpha, std::chrono::milliseconds interval, caf::actor router);

}  // namespace scg::actors

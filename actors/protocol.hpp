#pragma once
// The actor protocol: every message the router, session, backend and
// load-poller actors take, as typed interfaces, and what the router sends
// its cluster actor (cluster/messages.hpp has what replicas send each other).

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/backend.hpp"
#include "actors/holder_search.hpp"
#include "actors/placement.hpp"
#include "actors/route_answer.hpp"
#include "actors/router.hpp"
#include "actors/session_table.hpp"

// Local only (the data path to its router), never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(scg::actors::route_answer_ptr)

namespace scg::actors {

// Every message has one meaning; the typed interfaces below say who takes
// it, and the compiler rejects a message an actor does not take. CAF 0.17:
// atoms are at most 10 characters.

using bind_atom = caf::atom_constant<caf::atom("bind")>;          // a new session: place it
using held_atom = caf::atom_constant<caf::atom("held")>;          // a session a server may still hold: find it
using rebind_atom = caf::atom_constant<caf::atom("rebind")>;      // a session off its lost backend
using clone_atom = caf::atom_constant<caf::atom("clone")>;        // CloneSession's new session, on the original's backend
using op_atom = caf::atom_constant<caf::atom("op")>;              // an operation started
using op_done_atom = caf::atom_constant<caf::atom("op_done")>;    // an operation released
using release_atom = caf::atom_constant<caf::atom("release")>;    // a session released (ReleaseSession)
using closing_atom = caf::atom_constant<caf::atom("closing")>;    // the replica drains: no new sessions
using drain_atom = caf::atom_constant<caf::atom("drain")>;        // drain or undrain one backend
using backend_atom = caf::atom_constant<caf::atom("backend")>;    // a backend joined the running set
using activity_atom = caf::atom_constant<caf::atom("activity")>;  // this replica's report on a drained backend
using owner_atom = caf::atom_constant<caf::atom("owner")>;        // does this replica own the key?
using health_atom = caf::atom_constant<caf::atom("health")>;      // a backend's probe verdict changed
using load_atom = caf::atom_constant<caf::atom("load")>;          // a backend's utilization, polled
using ended_atom = caf::atom_constant<caf::atom("ended")>;        // a session actor forgot its session
using idle_atom = caf::atom_constant<caf::atom("idle")>;          // a session actor's last operation ended
using members_atom = caf::atom_constant<caf::atom("members")>;    // the live members of the cluster
using forget_atom = caf::atom_constant<caf::atom("forget")>;      // a session released on a peer
using holder_atom = caf::atom_constant<caf::atom("holder")>;      // a holder search's result
using decide_atom = caf::atom_constant<caf::atom("decide")>;      // the key's owner: the binding in force
using op_find_atom = caf::atom_constant<caf::atom("op_find")>;    // an operation id the data path's table missed
using where_op_atom = caf::atom_constant<caf::atom("where_op")>;  // a peer asks for an operation's backend
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;      // a peer asks for a session's binding, no decision
using put_atom = caf::atom_constant<caf::atom("put")>;            // replicate a local write
using erase_atom = caf::atom_constant<caf::atom("erase")>;        // replicate a local delete
using expire_atom = caf::atom_constant<caf::atom("expire")>;      // the router's sweep saw a session idle
using tick_atom = caf::atom_constant<caf::atom("tick")>;          // a self-addressed timer
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;        // the next step of a sweep
using probe_atom = caf::atom_constant<caf::atom("probe")>;        // time to probe the backend
using probed_atom = caf::atom_constant<caf::atom("probed")>;      // a probe's outcome
using confirm_atom = caf::atom_constant<caf::atom("confirm")>;    // is an owner's decision replicated here yet?
using leave_atom = caf::atom_constant<caf::atom("leave")>;        // SIGTERM: hand the last writes to the peers
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;  // the oldest routed call's deadline is due

/// A routed call waiting in the router (self-addressed messages name it).
using call_id = std::uint64_t;

/// A live peer replica, as its cluster actor tells the router (local).
struct member {
  std::string name;
  caf::actor router;           ///< its router (a peer_router_actor)
  std::uint32_t protocol = 0;  ///< the newest cluster protocol it announced
  bool owns_keys = false;      ///< its first sync is over (see router_state::owners)
};

/// The cluster as the cluster actor last saw it (members_atom).
struct membership {
  std::vector<member> peers;      ///< the members up, self excluded
  bool self_owns_keys = false;    ///< this replica's own first sync is over
  std::int64_t changed_ms = 0;    ///< wall ms of the last change: a member up or down, this replica synced
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member& x) {
  return f(caf::meta::type_name("member"), x.name, x.router, x.protocol, x.owns_keys);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, membership& x) {
  return f(caf::meta::type_name("membership"), x.peers, x.self_owns_keys, x.changed_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, holder_query& x) {
  return f(caf::meta::type_name("holder_query"), x.session_id, x.user_id, x.observed);
}

/// What a replica's cluster actor takes from its router (cluster/messages.hpp
/// extends it with what replicas send each other).
using replication_actor = caf::typed_actor<
    caf::reacts_to<put_atom, std::string, std::string, std::string, std::uint64_t>,  // key, value, session, started wall ms or 0
    caf::reacts_to<erase_atom, std::string>,                                          // key
    caf::reacts_to<release_atom, std::string>,  // a session's key ("s/…"): released here, out of the data path
    caf::reacts_to<backend_atom, std::string>,                     // name: re-apply what peers said of it
    // the last writes pushed to every up peer and acknowledged: peers, peers that acknowledged
    caf::replies_to<leave_atom>::with<std::uint32_t, std::uint32_t>>;

/// What a router takes from other replicas' routers (remote: the handles
/// travel as caf::actor in the cluster protocol and are cast to this). The
/// wire shape predates the typed interfaces and is kept for mixed versions.
using peer_router_actor = caf::typed_actor<
    // key -> backend name ("" none): the key's owner decides a new session
    caf::replies_to<decide_atom, std::string>::with<std::string>,
    // key, proposed backend -> the binding in force: a peer bound a clone or
    // found a holder, and the owner takes it unless a binding stands
    caf::replies_to<decide_atom, std::string, std::string>::with<std::string>,
    // operation id -> its backend's name ("" unknown here); protocol 2 on:
    // sent only to peers that announced it
    caf::replies_to<where_op_atom, std::string>::with<std::string>,
    // key -> the backend name its binding names here ("" unknown), never a
    // decision (a server may hold the session); protocol 4 on: sent only to
    // peers that announced it
    caf::replies_to<lookup_atom, std::string>::with<std::string>>;

/// The router: the session directory and its placement decisions.
using router_actor = peer_router_actor::extend<
    // from the data path (actors::router); each answers through its route_answer once
    caf::reacts_to<bind_atom, std::string, route_answer_ptr>,                // key
    caf::reacts_to<held_atom, std::string, holder_query, route_answer_ptr>,  // key, the session as Spark keys it
    caf::reacts_to<rebind_atom, std::string, route_answer_ptr>,              // key
    caf::reacts_to<clone_atom, std::string, backend_index, route_answer_ptr>,  // key, the original's backend
    caf::reacts_to<op_find_atom, std::string, std::string, route_answer_ptr>,  // op id, key
    caf::reacts_to<op_atom, std::string, std::string>,       // key, op id
    caf::reacts_to<op_done_atom, std::string, std::string>,  // key, op id
    caf::reacts_to<release_atom, std::string>,               // key
    caf::reacts_to<closing_atom>,
    caf::replies_to<leave_atom>::with<std::uint32_t, std::uint32_t>,  // as the cluster actor's; peers answered elsewhere
    caf::reacts_to<drain_atom, std::string, bool>,  // backend name, on
    caf::reacts_to<backend_atom, std::string>,      // backend name
    caf::reacts_to<activity_atom, std::string, std::string>,  // backend name, encode_activity ("" retracts)
    // from the backend and load-poller actors
    caf::replies_to<owner_atom, std::string>::with<bool>,  // replicated key ("h/NAME", "l/NAME")
    caf::reacts_to<health_atom, std::string, bool>,        // backend name, healthy
    caf::reacts_to<load_atom, std::string, double>,        // backend name, utilization
    // from session actors
    caf::reacts_to<ended_atom, std::string>,  // key
    caf::reacts_to<idle_atom, std::string>,   // key
    // from the cluster actor (the sender is it)
    caf::reacts_to<members_atom, membership>,
    caf::reacts_to<forget_atom, std::string>,  // key
    // self-addressed
    caf::reacts_to<holder_atom, std::string, std::int64_t>,  // key, backend index or -1
    caf::reacts_to<confirm_atom, std::string, std::string>,  // key, the backend its owner named
    caf::reacts_to<op_find_atom, std::string, std::string, call_id, std::uint32_t>,  // op id, key, call, looks left
    caf::reacts_to<deadline_atom>, caf::reacts_to<tick_atom>, caf::reacts_to<sweep_atom>>;

/// One session with live operations (spawned by the router).
using session_actor = caf::typed_actor<caf::reacts_to<op_atom, std::string>,       // op id
                                       caf::reacts_to<op_done_atom, std::string>,  // op id
                                       caf::reacts_to<release_atom>, caf::reacts_to<expire_atom>>;

/// One backend's reachability watch (tick) and health probes.
using backend_actor =
    caf::typed_actor<caf::reacts_to<tick_atom>, caf::reacts_to<probe_atom>, caf::reacts_to<probed_atom, bool>>;

/// One backend's Spark UI poller.
using load_poller_actor = caf::typed_actor<caf::reacts_to<tick_atom>>;

/// The router handle, for the files that only pass it on (router.hpp and
/// cluster/cluster.hpp name it without including CAF).
struct router_ref {
  router_actor handle;
};

/// Asks `router` whether this replica owns replicated `key` and calls
/// `then(mine)`; a router that does not answer within a second counts as
/// yes (better a duplicate probe or poll than none).
template <class Self, class F>
void ask_owner(Self* self, const router_actor& router, std::string key, F then) {
  self->request(router, std::chrono::seconds(1), owner_atom::value, std::move(key))
      .then([=](bool mine) { then(mine); }, [=](const caf::error&) { then(true); });
}

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
  /// A routed call not answered by then is answered route_timeout. Not
  /// configured: far above the longest routing chain (an owner asked twice,
  /// a lookup, a holder search within health.timeout_ms); tests shorten it.
  std::chrono::milliseconds route_deadline = std::chrono::seconds(30);
  std::string backend_token;   ///< what searches for a session's holder present to backends
  int search_timeout_ms = 1000;  ///< health.timeout_ms: each server's answer to a search
  /// cluster.settle_ms: for this long after the membership changed, an
  /// operation id nobody answers for may live on a replica not heard yet.
  std::int64_t settle_ms = 3000;
  replicated_view replicated;  ///< in a cluster: the replicated table, read-only
};

/// The session directory: places new sessions, spawns and tracks session
/// actors, expires operations.
router_actor spawn_router(caf::actor_system& sys, router_settings settings,
                          std::shared_ptr<session_table> table, backend_list backends);

/// One session with live operations: tracks them, expires after `ttl_ms`
/// idle (checked when the router's sweep sends expire_atom). Forgets its
/// entries in `table` and tells `router` (ended_atom) when the session ends;
/// when its last operation ends it tells `router` (idle_atom) and quits, and
/// the idle session lives on as its binding in `table` and the router's
/// directory, with no actor (about 0.3 KiB instead of 1.8).
session_actor spawn_session(caf::local_actor* parent, std::string key, std::shared_ptr<session_table> table,
                            std::int64_t ttl_ms, router_actor router);

/// One backend: watches its channel's connectivity (reachable) and, on the
/// replica that owns the backend (asked of `router`), probes it with a cheap
/// RPC every health.interval_ms and shares the verdict (healthy). The probe
/// carries `token` (scg's backend token) as a bearer token.
/// A backend that left the configured set and has no sessions on this
/// replica (`table`, at `index`) rests: no connection attempts, no probes.
backend_actor spawn_backend(caf::actor_system& sys, std::shared_ptr<backend_state> backend, backend_index index,
                            std::shared_ptr<session_table> table, const config::health& health, router_actor router,
                            std::string token);

/// Polls a backend's Spark UI every `interval` and keeps its utilization EWMA
/// (smoothing `alpha`) in backend->utilization — on the one replica that owns
/// the backend (asked of `router`), which shares the figure with the others.
load_poller_actor spawn_load_poller(caf::actor_system& sys, std::shared_ptr<backend_state> backend, double alpha,
                                    std::chrono::milliseconds interval, router_actor router);

}  // namespace scg::actors

#pragma once
// Internal to the router actor: its state, and the functions its behaviour
// (router_actor.cpp, a table of one-line handlers) calls, one file per
// concern:
//   router_actor.cpp      the behaviour, routed calls' answers and deadline,
//                         and actors::router, the data path's door
//   router_placement.cpp  placement: admission, deciding, binding, rebinding
//   router_cluster.cpp    the key's owner: asking it, deciding for peers, members
//   router_ops.cpp        operation ids the data path missed
//   router_held.cpp       sessions a server may still hold
//   router_sessions.cpp   the session directory: session actors, the sweeps
// The rest of scg sees actors/router.hpp and actors/protocol.hpp only.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/holder_search.hpp"
#include "actors/protocol.hpp"
#include "actors/session_directory.hpp"

namespace scg::actors {

/// A routed call the router has yet to answer.
struct pending_call {
  route_answer answer;
  caf::actor_clock::time_point deadline;  ///< settings.route_deadline after it arrived
};

struct router_state {
  router_settings settings;
  std::shared_ptr<session_table> table;
  backend_list backends;
  std::uint64_t cursor = 0;
  std::uint64_t ticks = 0;
  /// The idle-session sweep under way: where in `sessions` its next step
  /// starts, when the sweep began (steady clock) and its work so far.
  std::optional<session_directory<session_actor>::cursor> sweep;
  std::chrono::steady_clock::time_point sweep_started;
  std::chrono::microseconds sweep_work{};
  bool accepting = true;
  /// SIGTERM's drain is over and the last writes are going to the peers:
  /// peers decide their new sessions themselves (see leave_atom).
  bool leaving = false;
  /// This replica's sessions; the actor is null while a session is idle
  /// (no live operations): an idle session costs its key here and its binding.
  session_directory<session_actor> sessions;
  // The cluster, when there is one: our cluster actor and the live peers
  // (self excluded), as the cluster actor last told us.
  replication_actor cluster;
  std::vector<member> peers;
  bool self_owns_keys = false;             ///< this replica's first sync is over
  std::int64_t membership_changed_ms = 0;  ///< wall ms of the last membership change, as the cluster actor said
  /// Searches for the holder of a forgotten session under way: the calls waiting on each.
  std::unordered_map<std::string, std::vector<call_id>> searching;
  /// The routed calls not answered yet. Ids grow, so the first is the
  /// oldest and its deadline the nearest. Destroyed with the state when the
  /// router exits, each answer left answers shutting_down (route_answer).
  std::map<call_id, pending_call> calls;
  call_id last_call = 0;
  bool deadline_armed = false;  ///< a deadline_atom is on its way
  static inline const char* name = "router";
};

namespace routing {

using self_ptr = router_actor::stateful_pointer<router_state>;

/// How long the router waits for a peer's answer.
constexpr auto ask_timeout = std::chrono::milliseconds(1000);

// --- routed calls (router_actor.cpp)
/// Takes a routed call's answer out of its message; the call's id.
call_id admit(self_ptr self, const route_answer_ptr& in);
/// Answers routed call `call`, unless its deadline answered it already.
void answer(self_ptr self, call_id call, route_result r);
/// Answers route_timeout every call past its deadline.
void check_deadlines(self_ptr self);

// --- placement (router_placement.cpp)
/// Binds `key` to `backend`; its actor starts with its first operation.
backend_index bind(self_ptr self, const std::string& key, backend_index backend);
route_result decide_here(self_ptr self, const std::string& key, bool is_new = true, bool for_peer = false);
route_result adopt(self_ptr self, const std::string& key, const std::string& name);
void resolve_new(self_ptr self, const std::string& key, call_id call);
void rebind(self_ptr self, const std::string& key, call_id call);
void bind_clone(self_ptr self, const std::string& key, backend_index backend, call_id call);
/// Replicates `key` → `value`; an operation's entry also names its session
/// and its start (wall ms).
void replicate_put(self_ptr self, std::string key, std::string value, std::string session = {},
                   std::uint64_t started_ms = 0);
/// Sends a local write to the cluster actor, when there is one, to replicate.
template <class... Ts>
void replicate(self_ptr self, Ts&&... xs) {
  if (self->state.cluster) self->send(self->state.cluster, std::forward<Ts>(xs)...);
}
/// The backend the replicated table binds `key` to; empty when none, or
/// when this replica is not in a cluster.
std::string replicated(const router_state& st, const std::string& key);
/// Whether the replicated table holds a release's tombstone for `key`.
bool released(const router_state& st, const std::string& key);

// --- the key's owner and the members (router_cluster.cpp)
std::vector<std::string> owners(const router_state& st);
/// The live peer that owns `key`; nullptr when this replica does (or none is up).
const member* owner_peer(const router_state& st, const std::string& key);
peer_router_actor router_of(const member& m);
void resolve_in_cluster(self_ptr self, const std::string& key, call_id call);
void confirm(self_ptr self, const std::string& key, const std::string& name);
caf::result<std::string> decide_for_peer(self_ptr self, const std::string& key);
caf::result<std::string> adopt_for_peer(self_ptr self, const std::string& key, const std::string& name);
std::string lookup(self_ptr self, const std::string& key);
void set_members(self_ptr self, membership& view);
bool owns(self_ptr self, const std::string& key);
caf::result<std::uint32_t, std::uint32_t> leave(self_ptr self);

// --- operation ids (router_ops.cpp)
/// How many times a search for an unknown operation id looks (op_grace).
constexpr std::uint32_t op_looks = 4;
void find_op(self_ptr self, const std::string& op_id, const std::string& key, call_id call,
             std::uint32_t looks_left);
std::string where_op(self_ptr self, const std::string& op_id);

// --- sessions a server may hold (router_held.cpp)
void resolve_held(self_ptr self, const std::string& key, const holder_query& q, call_id call);
void holder_found(self_ptr self, const std::string& key, std::int64_t found);

// --- the session directory (router_sessions.cpp)
void operation_started(self_ptr self, const std::string& key, std::string& op_id);
void operation_released(self_ptr self, const std::string& key, std::string& op_id);
void release(self_ptr self, const std::string& key);
void forget(self_ptr self, const std::string& key);
void session_ended(self_ptr self, const std::string& key);
void session_idle(self_ptr self, const std::string& key);
void set_draining(self_ptr self, const std::string& name, bool on);
void publish_activity(self_ptr self, const std::string& name, const std::string& report);
void tick(self_ptr self);
void sweep_step(self_ptr self);
/// How often the router ticks: operation expiry, and the start of session sweeps.
constexpr auto op_sweep_interval = std::chrono::seconds(1);

}  // namespace routing
}  // namespace scg::actors

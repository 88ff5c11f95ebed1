#pragma once
// The router: the data path's only door into the actors. Every call is a
// non-blocking send; answers come back through a callback (which the call
// posts to its own worker), so a data-plane worker never waits on an actor.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/backend.hpp"
#include "actors/session_table.hpp"
#include "core/local_reply.hpp"
#include "config/config.hpp"

namespace caf {
class actor_system;
}  // namespace caf

namespace scg::actors {

struct router_ref;  // the router actor's typed handle (actors/protocol.hpp)

/// The answer to a routing question: a backend, or why there is none.
struct route_result {
  std::optional<backend_index> backend;
  std::string error;  ///< set when backend is empty
  core::local_reason refusal = core::local_reason::no_backend;  ///< why, when backend is empty
  int retry_after_ms = 0;  ///< for a "retry later" refusal: when to try again
};

/// In a cluster, the router's read-only view of the replicated table; each
/// function reads it under a shared lock on the router's thread instead of
/// asking the cluster actor, whose mailbox may hold seconds of repair batches
/// during a sync. Empty outside a cluster.
struct replicated_view {
  /// The backend a live entry binds a key ("s/…", "o/…") to; empty when none.
  std::function<std::string(const std::string&)> backend;
  /// Whether the key's entry is a release's tombstone.
  std::function<bool(const std::string&)> released;
};

/// Called exactly once with the answer (actors/route_answer.hpp): on an
/// actor thread, or on the caller's when the router is gone already. A call
/// still unanswered after a routing deadline (30 s) hears route_timeout, one
/// pending when the router exits shutting_down.
using route_callback = std::function<void(route_result)>;

/// Front of the router actor (session directory and placement decisions).
class router {
 public:
  /// Spawns the router actor and one backend actor per backend. Health
  /// probes and holder searches present `backend_token` (may be empty).
  /// `on_members` hears the number of live replicas (self included) whenever
  /// it changes, from an actor thread. In a cluster, `replicated` reads the
  /// replicated table.
  router(caf::actor_system& sys, const config::gateway& cfg, std::shared_ptr<session_table> table,
         backend_list backends, std::string backend_token, std::function<void(std::size_t)> on_members = {},
         replicated_view replicated = {});
  ~router();

  /// Binds a brand-new session (key from session_key::str()) to a backend
  /// chosen by placement, spawning its session actor; if the key is bound by
  /// now, answers that binding.
  void resolve(std::string key, route_callback done) const;

  /// As resolve(), for a session the client has seen on a server (it sent
  /// client_observed_server_side_session_id): in a cluster the key's owner
  /// is asked for its binding first (it decides nothing); when it knows
  /// none, a server that still holds the session gets the binding; only
  /// when none does is it placed (holder_search.hpp).
  void resolve_held(std::string key, std::string session_id, std::string spark_user, std::string observed,
                    route_callback done) const;

  /// Moves `key` off the lost backend it is bound to: a new placement,
  /// replicated, audited. Answers like resolve().
  void rebind(std::string key, route_callback done) const;

  /// Binds `key` to `backend` unless bound (CloneSession's new session); in
  /// a cluster, also at the key's owner. `done` hears the binding in force
  /// once the owner has it (or did not answer within a second).
  void bind_clone(std::string key, backend_index backend, route_callback done) const;

  /// Operation `op_id`, which the data path's table does not hold: its
  /// backend from the replicated table or from a peer that knows it (the
  /// replica where it started knows it before its client does), `key` being
  /// the call's session. No backend and no error when nobody answers with it
  /// within a second, or when the session's binding is known here (the
  /// operation runs on its session's backend); while the cluster settles and
  /// the session is unknown too, it looks again for up to op_grace (a delta
  /// on its way) before the refusal operation_unsettled.
  void find_operation(std::string op_id, std::string key, route_callback done) const;

  /// The session `key` started operation `op_id`.
  void operation_started(std::string key, std::string op_id) const;

  /// Operation `op_id` of `key` was released (ReleaseExecute release_all).
  void operation_released(std::string key, std::string op_id) const;

  /// The backend accepted ReleaseSession for `key`: forget it.
  void session_released(std::string key) const;

  /// Stops taking new sessions (SIGTERM drain).
  void stop_new_sessions() const;

  /// Ends the router and waits until it is gone: every call it still held
  /// has had its answer (shutting_down). Called once the workers stopped,
  /// before they are destroyed, so no answer is posted to a worker that is gone.
  void stop() const;

  /// What leave_cluster saw: the peers up, those that acknowledged every
  /// last write, and why it did not finish (empty when it did).
  struct leave_result {
    std::uint32_t peers = 0;
    std::uint32_t acknowledged = 0;
    std::string error;
  };

  /// SIGTERM, after the drain: stops deciding new sessions for peers and
  /// pushes this replica's last writes to every up peer, waiting (at most
  /// `timeout`) until each has merged them.
  leave_result leave_cluster(std::chrono::milliseconds timeout) const;

  /// Drains (`on`) or undrains backend `name` on every replica: a draining
  /// backend takes no new sessions; its sessions and operations continue.
  void set_draining(std::string name, bool on) const;

  /// Publishes this replica's activity on drained backend `name` to every
  /// replica (`report`: encode_activity); an empty `report` retracts it.
  void publish_activity(std::string name, std::string report) const;

  /// Starts the actors of backend `index`, just added to the shared
  /// backend_list (reload or DNS), and has the cluster apply what peers
  /// already said of it (drain, health, load, bindings).
  void add_backend(backend_index index) const;

  /// The router actor (the cluster actor tells it the members).
  const router_ref& actor() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace scg::actors

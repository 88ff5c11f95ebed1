#pragma once
// The replica cluster: membership, replication and the owner of each
// new-session decision. One cluster actor per replica.

#include <functional>
#include <memory>
#include <string>

#include "actors/backend.hpp"
#include "actors/session_table.hpp"
#include "cluster/cluster_view.hpp"
#include "cluster/replicated_table.hpp"
#include "config/config.hpp"

namespace caf {
class actor_system;
class actor_system_config;
}  // namespace caf

namespace scg::actors {
struct router_ref;  // actors/protocol.hpp
}  // namespace scg::actors

namespace scg::cluster {

/// Settings of caf::io for the cluster: middleman, identity, heartbeats and
/// the message types. Call before the actor system starts.
void configure(caf::actor_system_config& cfg, const config::cluster& c);

/// Starts the cluster actor of this replica: publishes it on c.bind_addr,
/// dials the seeds, replicates the session table and operation index, and
/// tells `router` the live members. `replicated`, empty at the start, is the
/// replicated table: the cluster actor fills and changes it, the router reads
/// it (replicated_table::live_backend) without asking the cluster actor.
/// Bindings live cluster-wide while some replica uses them: a replica that
/// serves a session or operation refreshes its entry every quarter `ttl`, and
/// an entry nobody refreshed for a whole `ttl` is deleted (a tombstone) by
/// whichever replica sees it first. `on_ready` runs once, after the first
/// full sync with a peer or after c.sync_wait_secs with none reachable.
/// Returns the port bound (0 on failure, with the reason logged).
std::uint16_t start(caf::actor_system& sys, const config::cluster& c, const config::affinity& ttl,
                    std::shared_ptr<replicated_table> replicated, std::shared_ptr<actors::session_table> table,
                    actors::backend_list backends, const actors::router_ref& router,
                    std::shared_ptr<cluster_view> view, std::function<void()> on_ready);

/// Stops the cluster actor start() spawned, if any: call before the actor
/// system goes away (published on the middleman, it would keep it alive).
void stop(caf::actor_system& sys);

}  // namespace scg::cluster

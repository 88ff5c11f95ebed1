// The cluster actor: one per replica. It
//   - publishes itself on cluster.bind_addr and dials the seeds (each address
//     a seed name resolves to), re-dialing with backoff;
//   - greets peers with its node name and protocol versions and gossips the
//     addresses it knows, so the replicas form a full mesh; refuses a peer
//     that speaks no protocol version it speaks;
//   - versions local writes (hybrid logical clock + node name), pushes them
//     in micro-batches, merges what peers send (newest version wins), hands
//     a member back up after a partition the writes it missed (write_log.hpp)
//     and repairs what was lost by digest anti-entropy on (re)connect and
//     periodically;
//   - mirrors the replicated table into the data path's session table;
//   - tells the router which members are up, so it can ask a key's owner.
// This file holds its message table, start-up and stop, and what the router
// is told; cluster_state.hpp lists the files that do the rest.
#include "cluster/cluster.hpp"
#include "cluster/cluster_guard.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <memory>

#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "cluster/protocol_version.hpp"
#include "core/address.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"

namespace scg::cluster {

namespace {

constexpr caf::atom_value registry_key = caf::atom("scgcluster");  // where stop() finds the actor

/// The plain-TCP cluster port's guard, from start() to stop() (one cluster per process).
std::unique_ptr<cluster_guard> guard;

}  // namespace

void publish_view(self_ptr self) {
  auto& st = self->state;
  st.view->set(st.members.view(st.self_address, core::wall_now_ms(), st.synced), st.conflicts, st.synced);
}

/// Tells the router who is up (names, their routers and the newest protocol
/// each announced), self excluded, and who owns keys: the members whose
/// first sync is over, self included once synced. A replica still syncing
/// would decide a new session with a partial table, while its mailbox holds
/// the repair; the next owner decides instead.
void publish_members(self_ptr self) {
  auto& st = self->state;
  actors::membership view;
  for (const auto& [name, m] : st.members.members())
    if (m.up) view.peers.push_back({name, m.router, m.version.protocol, m.synced});
  view.self_owns_keys = st.synced;
  view.changed_ms = st.membership_changed_ms;
  self->send(st.router, actors::members_atom::value, std::move(view));
  publish_view(self);
}

/// A peer's message this replica cannot use (another version's, or
/// malformed): counted, and logged at most once per 10 s with how many were
/// held back (a peer repeats such a message every round).
void dropped_message(const std::string& what) {
  static core::log_throttle throttle;
  core::bump(global_cluster_stats().cluster_messages_dropped_total);
  if (auto held = throttle.pass(); held >= 0) log().warn("{} held_back={}", what, held);
}

namespace {

/// The state from what start() handed over, and the handlers of errors,
/// links down and messages this build does not take.
void init(self_ptr self, cluster_setup setup) {
  auto& st = self->state;
  st.cfg = std::move(setup.cfg);
  st.members = members_table{st.cfg.node_name, announced_version(st.cfg.test_cluster_protocol)};
  if (st.cfg.test_flush_delay_ms >= 0) st.flush_delay = std::chrono::milliseconds(st.cfg.test_flush_delay_ms);
  st.ttls = {std::int64_t{setup.ttl.session_ttl_secs} * 1000, std::int64_t{setup.ttl.op_ttl_secs} * 1000};
  st.table = std::move(setup.table);
  st.sessions = std::move(setup.sessions);
  st.backends = std::move(setup.backends);
  st.router = std::move(setup.router);
  st.view = std::move(setup.view);
  st.on_ready = std::move(setup.on_ready);
  // A peer of another version may answer a message it does not know with an
  // error: logged, never the end of this actor (CAF's default would be).
  self->set_error_handler([=](caf::error& err) {
    log().warn("peer_error reason=\"{}\"", self->system().render(err));
  });
  self->set_down_handler([=](const caf::down_msg& msg) { on_down(self, msg); });
  self->set_default_handler([](caf::scheduled_actor* me, caf::message_view& x) {
    dropped_message("unexpected_message content=\"" + caf::to_string(x.content()) +
                    "\" reason=\"a peer of another scg version?\"");
    return caf::drop(me, x);
  });
}

/// Where peers reach this replica, sent by start() once the cluster port is
/// open: from now on peers are heard and dialed, and the sync wait runs.
void on_address(self_ptr self, const std::string& address) {
  auto& st = self->state;
  st.self_address = address;
  st.members.add_self_address(address);
  log().info("cluster_listening node={} address={} seeds={}", st.cfg.node_name, address, st.cfg.seeds.size());
  self->send(self, dial_atom::value);
  self->delayed_send(self, anti_entropy_interval, ae_atom::value);
  if (st.cfg.seeds.empty())
    mark_ready(self, "no seeds: first replica");
  else
    self->delayed_send(self, std::chrono::seconds(st.cfg.sync_wait_secs), ready_atom::value);
}

}  // namespace

/// The message table: each message to the function that handles it.
cluster_actor::behavior_type cluster_behavior(self_ptr self, cluster_setup setup) {
  init(self, std::move(setup));
  publish_members(self);
  return {
      // --- a backend joined the running set: apply what peers said of it -----
      [=](actors::backend_atom, const std::string& name) { mirror_backend(self, name); },

      // --- from peers (each waits in the mailbox until this replica listens) ---
      [=](hellov_atom, std::uint32_t protocol, std::uint32_t min_protocol, const std::string& scg_version,
          const std::string& name, const std::string& address, const caf::actor& router,
          const std::vector<std::string>& known) -> caf::result<void> {
        return on_hello(self, name, address, router, known, peer_version{protocol, min_protocol, scg_version});
      },
      [=](hello_atom, const std::string& name, const std::string& address, const caf::actor& router,
          const std::vector<std::string>& known) -> caf::result<void> {
        return on_hello(self, name, address, router, known, std::nullopt);
      },
      [=](digest_atom, const std::vector<std::uint64_t>& d) -> caf::result<void> { return on_digest(self, d); },
      [=](digestf_atom, const std::vector<std::uint64_t>& d) -> caf::result<void> { return on_fine_digest(self, d); },
      [=](entries_atom, const std::vector<entry>& batch, bool sync_reply) -> caf::result<ack_atom> {
        return on_entries(self, batch, sync_reply);
      },
      [=](entriesp_atom, const std::string& bytes, std::uint32_t count, bool sync_reply) -> caf::result<ack_atom> {
        return on_packed_entries(self, bytes, count, sync_reply);
      },
      [=](delta_atom, const std::vector<entry>& batch) -> caf::result<void> { return on_delta(self, batch); },
      [=](synced_atom) -> caf::result<void> { return on_peer_synced(self); },

      // --- from the router ------------------------------------------------------
      [=](actors::put_atom, std::string& key, std::string& backend, std::string& session, std::uint64_t started_ms) {
        write_local(self, entry{std::move(key), std::move(backend), std::move(session), {}, false, 0, started_ms});
      },
      [=](actors::erase_atom, std::string& key) { write_local(self, entry{std::move(key), {}, {}, {}, true, 0}); },
      [=](actors::release_atom, std::string& key) { release_local(self, std::move(key)); },
      [=](actors::leave_atom) -> caf::result<std::uint32_t, std::uint32_t> { return leave(self); },

      // --- from start() and the seed resolver -------------------------------------
      [=](address_atom, const std::string& address) { on_address(self, address); },
      [=](resolved_atom, const std::vector<std::string>& addrs) { on_resolved(self, addrs); },

      // --- timers -------------------------------------------------------------
      [=](flush_atom) { flush(self); },
      [=](dial_atom) { dial_round(self); },
      [=](probe_atom) { on_probe_poll(self); },
      [=](ae_atom) { anti_entropy_round(self); },
      [=](refresh_atom) { refresh_step(self); },
      [=](repair_step_atom, const caf::actor_addr& peer) { on_repair_step(self, peer); },
      [=](ack_due_atom) { release_held_ack(self); },
      [=](ready_atom) { check_ready(self); },
  };
}

void configure(caf::actor_system_config& cfg, const config::cluster& c) {
  cfg.load<caf::io::middleman>();
  if (c.tls) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = c.tls->cert_file;
    cfg.openssl_key = c.tls->key_file;
    cfg.openssl_cafile = c.tls->ca_file;  // a CA makes the peer's certificate required
  }
  cfg.set("middleman.app-identifiers", std::vector<std::string>{c.identity});
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(c.heartbeat_interval_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(c.connection_timeout_ms)});
  add_message_types(cfg);
}

std::uint16_t start(caf::actor_system& sys, const config::cluster& c, const config::affinity& ttl,
                    std::shared_ptr<replicated_table> replicated, std::shared_ptr<actors::session_table> table,
                    actors::backend_list backends, const actors::router_ref& router,
                    std::shared_ptr<cluster_view> view, std::function<void()> on_ready) {
  const auto bind = core::parse_host_port(c.bind_addr, true);  // the config validated it
  if (!bind) {
    spdlog::get("cluster")->error("cluster_listen_failed bind_addr={} reason=\"not host:port\"", c.bind_addr);
    return 0;
  }
  const auto& [host, port] = *bind;
  // The address peers dial: the bind host, or this host's name for a wildcard.
  const bool wildcard = host == "0.0.0.0" || host == "::";
  std::string advertised = host;
  if (wildcard) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    advertised = buf;
  }
  // On the scheduler (seed names are resolved on a thread of their own): a
  // detached actor's thread would wait at exit for every reference to it.
  // Published untyped, as before the typed interfaces: the handshake peers
  // of older versions see is unchanged.
  auto actor = caf::actor_cast<caf::actor>(sys.spawn(
      cluster_behavior, cluster_setup{c, ttl, std::move(replicated), table, backends, router.handle, view,
                                      std::move(on_ready)}));
  // With TLS, CAF listens on bind_addr itself. Without, on a loopback port
  // behind the guard, which listens on bind_addr (cluster_guard.hpp).
  const char* in = wildcard ? nullptr : host.c_str();
  auto bound = c.tls ? caf::openssl::publish(actor, port, in, true)
                     : sys.middleman().publish(actor, 0, "127.0.0.1", true);
  std::string guard_error;
  if (bound && !c.tls) {
    guard = cluster_guard::start(c.bind_addr, *bound, std::chrono::milliseconds(c.connection_timeout_ms),
                                 guard_error);
    if (guard) bound = guard->port();
  }
  if (!bound || !guard_error.empty()) {
    spdlog::get("cluster")->error("cluster_listen_failed bind_addr={} reason=\"{}\"", c.bind_addr,
                                  bound ? guard_error : sys.render(bound.error()));
    if (bound) sys.middleman().unpublish(actor, 0);
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    return 0;
  }
  caf::anon_send(actor, address_atom::value, core::host_port{advertised, *bound}.str());
  sys.registry().put(registry_key, actor);
  return *bound;
}

void stop(caf::actor_system& sys) {
  if (auto actor = sys.registry().get<caf::actor>(registry_key)) {
    sys.registry().erase(registry_key);
    sys.middleman().unpublish(actor, 0);
    // Waits (briefly) for it to end: a request still waiting for a peer's
    // answer (a hand-off at SIGTERM) holds the actor, which frees it only
    // when it ends; the system would otherwise stop first and leak it.
    caf::scoped_actor waiter{sys};
    waiter->monitor(actor);
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    waiter->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(1)) >> [] {});
  }
  guard.reset();
}

}  // namespace scg::cluster

// The cluster actor's members: greetings (with protocol versions and the
// addresses this replica knows, so the replicas form a full mesh), the
// verdict on each (membership.hpp decides, this acts), members seen down
// and forgotten, one-way splits mended by greeting again.
#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "cluster/protocol_version.hpp"
#include "core/metrics.hpp"

namespace scg::cluster {

/// Introduces this replica to `peer`: the versioned hello, then the legacy
/// one while this replica speaks protocol 1 (v0.1.0 peers act on that one and
/// log the other as unexpected; newer peers act on the first). Both come from
/// one actor to one actor, so they arrive in this order. The router goes as a
/// caf::actor, the type older replicas expect.
void greet(self_ptr self, const cluster_actor& peer) {
  auto& st = self->state;
  const auto& v = st.members.self();
  const auto router = caf::actor_cast<caf::actor>(st.router);
  self->send(peer, hellov_atom::value, v.protocol, v.min_protocol, v.scg_version, st.cfg.node_name, st.self_address,
             router, st.members.known_addresses());
  if (sends_legacy_hello(v))
    self->send(peer, hello_atom::value, st.cfg.node_name, st.self_address, router, st.members.known_addresses());
}

namespace {

/// A peer that greeted is a member now: watched, greeted back, handed off
/// to or sent our digest, told we are synced, and the router told.
void member_joined(self_ptr self, const cluster_actor& sender, const cluster_actor& replaced,
                   const std::string& name, const std::string& address) {
  auto& st = self->state;
  if (replaced) self->demonitor(replaced.address());
  self->monitor(sender);
  greet(self, sender);  // the other side learns us even if it did not dial
  const auto& m = st.members.members().at(name);
  if (!hand_off(self, sender, name, static_cast<bool>(replaced)) && asks_repair_from(self, sender))
    send_digest(self, m);
  const auto& v = m.version;
  tell_synced(self, sender, v);
  log().info("member_up node={} address={} protocol={} scg_version={}", name, address, v.protocol,
             v.scg_version.empty() ? "unknown" : v.scg_version);
  st.membership_changed_ms = core::wall_now_ms();
  publish_members(self);
}

/// No protocol version in common: logged once per peer and version, and
/// the peer greeted once so that it refuses too.
void refused(self_ptr self, const cluster_actor& sender, const std::string& name, const std::string& address,
             const std::optional<peer_version>& announced) {
  const auto theirs = announced.value_or(legacy_peer());
  const auto& ours = self->state.members.self();
  core::bump(global_cluster_stats().cluster_protocol_refused_total);
  log().error("peer_refused node={} address={} peer_protocols={}-{} peer_scg_version={} protocols={}-{} "
              "scg_version={} reason=\"no cluster protocol version in common: replicas of these versions "
              "cannot be mixed (docs/cluster.md, Protocol versions)\"", name, address, theirs.min_protocol,
              theirs.protocol, theirs.scg_version.empty() ? "unknown" : theirs.scg_version, ours.min_protocol,
              ours.protocol, ours.scg_version);
  greet(self, sender);  // once: so the peer learns of it and refuses too
}

}  // namespace

/// A peer's hello, versioned (`announced`) or legacy (nullopt): membership
/// decides, this acts on its verdict.
caf::result<void> on_hello(self_ptr self, const std::string& name, const std::string& address,
                           const caf::actor& router, const std::vector<std::string>& known,
                           const std::optional<peer_version>& announced) {
  if (!listening(self)) return caf::skip;
  auto& st = self->state;
  auto sender = caf::actor_cast<cluster_actor>(self->current_sender());
  // A hello whose sender's link broke on the way arrives without one:
  // nothing to answer, nobody to watch (the peer greets again).
  if (!sender) return {};
  cluster_actor replaced;
  bool warn = false;
  using verdict = members_table::hello;
  switch (st.members.on_hello(sender, router, sender.node() == self->node(), name, address, known, announced,
                              core::wall_now_ms(), &replaced, &warn)) {
    case verdict::ours:
    case verdict::twin_again:
      break;
    case verdict::known:
      // It may be greeting because it saw this replica down (see greet_back)
      // and took it back: then it counts this replica unsynced, so owning
      // no keys, until told again (after the greeting, which it takes first).
      if (st.members.greet_back(name, core::wall_now_ms())) greet(self, sender);
      tell_synced(self, sender, st.members.members().at(name).version);
      break;
    case verdict::twin:
      greet(self, sender);  // once: so the other one learns of it too
      core::bump(global_cluster_stats().cluster_duplicate_names_total);
      log().error("duplicate_node_name node={} address={} reason=\"another replica uses this node_name; "
                  "they cannot both be members\"", name, address);
      break;
    case verdict::bad_address:
      log().warn("hello_refused node={} reason=\"unusable address '{}'\"", name, address);
      break;
    case verdict::claimed:
      if (!warn) break;
      core::bump(global_cluster_stats().cluster_duplicate_names_total);
      log().error("duplicate_node_name node={} address={} member_address={} reason=\"two replicas use this "
                  "node_name; the one seen first stays the member\"", name, address,
                  st.members.members().at(name).address);
      break;
    case verdict::refused:
      if (warn) refused(self, sender, name, address, announced);
      break;
    case verdict::joined:
      member_joined(self, sender, replaced, name, address);
      break;
  }
  return {};
}

/// What came from the current sender (a digest, a delta, a repair) comes
/// only from a peer that counts this replica up: if this replica counts it
/// down, the split is one-way and a greeting mends it (membership::greet_stray).
void greet_if_stray(self_ptr self) {
  auto& st = self->state;
  const auto& from = self->current_sender();
  if (!from) return;
  const auto name = st.members.greet_stray(from, core::wall_now_ms());
  if (name.empty()) return;
  core::bump(global_cluster_stats().cluster_one_way_greetings_total);
  log().warn("one_way_split node={} reason=\"it replicates to this replica, which counts it down: greeting it\"", name);
  greet(self, caf::actor_cast<cluster_actor>(from));
}

/// A watched link dropped: its members are down (handed off what they
/// missed when they are back), a repair to it is over.
void on_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  for (const auto& name : st.members.on_down(msg.source, now)) {
    const auto& m = st.members.members().at(name);
    log().warn("member_down node={} address={} reason=\"{}\"{}", name, m.address, self->system().render(msg.reason),
               m.flapped ? " flapped=true" : "");
    st.membership_changed_ms = now;
    note_missed(self, name, m.last_seen_ms, now);
  }
  // A repair to it is over: its messages went with the link (their answers
  // would come only at repair_timeout); the next one starts when it is back.
  if (auto r = st.repairing.find(msg.source); r != st.repairing.end()) {
    r->second->failed = true;
    st.repairing.erase(r);
  }
  publish_members(self);
}

/// A peer's first sync is over: it owns keys from now on.
caf::result<void> on_peer_synced(self_ptr self) {
  if (!listening(self)) return caf::skip;
  if (self->state.members.on_synced(self->current_sender())) publish_members(self);
  return {};
}

/// Drops members down for cluster.forget_after_secs (a scaled-down pod), with
/// their addresses: the dial list keeps what the seed names resolve to, so a
/// member that comes back is found again.
void forget_departed(self_ptr self) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  const auto gone = st.members.forget_departed(now, std::int64_t{st.cfg.forget_after_secs} * 1000);
  for (const auto& [name, m] : gone) {
    log().info("member_forgotten node={} address={} down_secs={}", name, m.address, (now - m.last_seen_ms) / 1000);
    st.missed_since.erase(name);
    st.digest_held_until.erase(name);
  }
  if (!gone.empty()) publish_members(self);
}

}  // namespace scg::cluster

// The router in a cluster: each key's owner decides its new session (asked
// by the others, who confirm its write), the members as the cluster actor
// tells them, and what the router answers its peers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "actors/router_state.hpp"
#include "actors/router_stats.hpp"
#include "core/metrics.hpp"
#include "core/rendezvous.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors::routing {

using core::key_kind;
using core::make_key;

namespace {

/// How long after an owner's answer its write must be in the replicated
/// table here (a delta takes about 5 to 10 ms) before this replica writes
/// the binding itself.
constexpr auto confirm_after = std::chrono::milliseconds(200);

/// A wait this much longer than ask_timeout means this replica was stopped
/// or starved while it waited (a SIGSTOP), not that the peer was silent.
constexpr auto stalled_after = ask_timeout + std::chrono::milliseconds(300);

/// The key's owner decides a new session; this replica decides only when it
/// owns the key, or when the owner does not answer (the merge resolves any
/// conflict, counted). A time-out that fired only because this replica was
/// frozen past it asks again, once: the owner likely answered meanwhile,
/// and deciding here would bind the session a second time. (The wait is
/// read on the actor clock: the steady clock, or a test's.)
void decide_via_owner(self_ptr self, const std::string& key, call_id call, bool asked_again = false) {
  const auto* owner = owner_peer(self->state, key);
  if (!owner) return answer(self, call, decide_here(self, key));
  const auto asked = self->clock().now();
  const auto observe = [self, asked] {
    auto& m = global_router_stats();
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(self->clock().now() - asked);
    m.owner_answer.observe(core::decision_bounds_us, static_cast<std::uint64_t>(waited.count()));
  };
  self->request(router_of(*owner), ask_timeout, decide_atom::value, key)
      .then(
          [=](const std::string& name) {
            observe();
            // No answer: the owner found no backend, or (before 0.2.0) it was
            // shutting down. This replica decides; with no backend it says so.
            if (name.empty()) return answer(self, call, decide_here(self, key));
            auto r = adopt(self, key, name);
            // The owner replicates its decision; should it die or freeze
            // before that leaves it, this replica writes it (confirm_atom).
            if (r.backend) self->delayed_send(self, confirm_after, confirm_atom::value, key, name);
            answer(self, call, r);
          },
          [=](const caf::error&) {
            observe();
            if (!asked_again && self->clock().now() - asked > stalled_after) {
              core::bump(global_router_stats().router_owner_asked_again_total);
              return decide_via_owner(self, key, call, true);
            }
            core::bump(global_router_stats().router_owner_unreachable_total);
            answer(self, call, decide_here(self, key));
          });
}

}  // namespace

/// The replicas among which each key has its owner: those whose first sync
/// is over (self included), as the cluster actor last said; all of them
/// while none is (a cluster starting together).
std::vector<std::string> owners(const router_state& st) {
  std::vector<std::string> out;
  for (const auto& m : st.peers)
    if (m.owns_keys) out.push_back(m.name);
  if (st.self_owns_keys) out.push_back(st.settings.node_name);
  if (!out.empty()) return out;
  for (const auto& m : st.peers) out.push_back(m.name);
  out.push_back(st.settings.node_name);
  return out;
}

const member* owner_peer(const router_state& st, const std::string& key) {
  const auto owner = core::owner_of(key, owners(st));
  auto it = std::find_if(st.peers.begin(), st.peers.end(), [&](const member& m) { return m.name == owner; });
  return it == st.peers.end() ? nullptr : &*it;
}

peer_router_actor router_of(const member& m) { return caf::actor_cast<peer_router_actor>(m.router); }

/// Resolves a session this replica has no binding for: the replicated table
/// may hold it (bound elsewhere, or forgotten here when idle), else its
/// owner decides.
void resolve_in_cluster(self_ptr self, const std::string& key, call_id call) {
  if (auto name = replicated(self->state, make_key(key_kind::session, key)); !name.empty())
    return answer(self, call, adopt(self, key, name));
  decide_via_owner(self, key, call);
}

/// An owner's answer, bound here a moment ago: if its write has not arrived
/// (the owner died or froze right after deciding), nor any newer write or
/// release, this replica writes the binding, so the others know it too and
/// do not decide it again.
void confirm(self_ptr self, const std::string& key, const std::string& name) {
  auto& st = self->state;
  const auto full = make_key(key_kind::session, key);
  if (!replicated(st, full).empty() || released(st, full)) return;
  auto b = st.table->session_backend(key);
  if (!b || st.backends[*b]->name != name) return;  // released or rebound here meanwhile
  core::bump(global_router_stats().router_decisions_confirmed_total);
  replicate_put(self, full, name);
}

/// A peer asks us, the key's owner, to decide.
caf::result<std::string> decide_for_peer(self_ptr self, const std::string& key) {
  auto& st = self->state;
  if (st.leaving) return caf::make_error(caf::sec::request_receiver_down);
  if (auto b = st.table->find_session(key, now_ms())) return st.backends[*b]->name;
  const auto name = replicated(st, make_key(key_kind::session, key));
  const auto r = name.empty() ? decide_here(self, key, true, true) : adopt(self, key, name);
  return r.backend ? st.backends[*r.backend]->name : std::string();
}

/// A peer bound a clone or found a holder and tells us, the key's owner,
/// before its client hears of it: our binding stands, else we take theirs.
caf::result<std::string> adopt_for_peer(self_ptr self, const std::string& key, const std::string& name) {
  auto& st = self->state;
  if (st.leaving) return caf::make_error(caf::sec::request_receiver_down);
  if (auto b = st.table->find_session(key, now_ms())) return st.backends[*b]->name;
  auto r = adopt(self, key, name);  // not kept if released meanwhile (the news waited out a partition)
  return r.backend ? st.backends[*r.backend]->name : std::string();
}

/// A peer missed this session on its held path: our binding, read without
/// touching it; never a decision (a server may hold it).
std::string lookup(self_ptr self, const std::string& key) {
  auto& st = self->state;
  if (auto b = st.table->session_backend(key)) return st.backends[*b]->name;
  return replicated(st, make_key(key_kind::session, key));
}

/// The cluster actor's view of the members; it is the sender.
void set_members(self_ptr self, membership& view) {
  auto& st = self->state;
  st.membership_changed_ms = view.changed_ms;
  st.cluster = caf::actor_cast<replication_actor>(self->current_sender());
  st.peers = std::move(view.peers);
  st.self_owns_keys = view.self_owns_keys;
  if (st.settings.on_members) st.settings.on_members(st.peers.size() + 1);
}

/// Whether this replica owns replicated `key` (alone, it owns every key).
bool owns(self_ptr self, const std::string& key) {
  auto& st = self->state;
  if (!st.cluster || st.peers.empty()) return true;
  return core::owner_of(key, owners(st)) == st.settings.node_name;
}

/// SIGTERM, the drain over. A decision taken for a peer from now on might
/// not leave this replica before it exits, and the asker alone would know
/// it: peers are refused and decide themselves (as when an owner is
/// unreachable). The cluster actor gets this after every write sent before
/// it, and pushes them all to the peers.
caf::result<std::uint32_t, std::uint32_t> leave(self_ptr self) {
  auto& st = self->state;
  st.accepting = false;
  st.leaving = true;
  if (!st.cluster) return {std::uint32_t{0}, std::uint32_t{0}};
  return self->delegate(st.cluster, leave_atom::value);
}

}  // namespace scg::actors::routing

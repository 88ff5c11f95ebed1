// Sessions a server may still hold, which neither table here binds (the
// client observed its server-side session, or the RPC never creates one):
// the key's owner is asked whether it knows the binding, then every healthy
// server is searched (actors/holder_search); only when none holds the
// session is it placed as a new one.
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <vector>

#include "actors/router_state.hpp"
#include "actors/router_stats.hpp"
#include "core/metrics.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors::routing {

using core::key_kind;
using core::make_key;

namespace {

/// The first peer protocol that answers lookup (cluster/protocol_version.hpp:
/// 0.2.0's; a v0.1.0 peer is never asked).
constexpr std::uint32_t lookup_protocol = 4;

/// The calls waiting for the holder of `key`, no longer waiting.
std::vector<call_id> stop_waiting(router_state& st, const std::string& key) {
  auto it = st.searching.find(key);
  if (it == st.searching.end()) return {};
  auto waiting = std::move(it->second);
  st.searching.erase(it);
  return waiting;
}

/// The calls waiting for the holder of `key` hear that `name` binds it.
void held_known(self_ptr self, const std::string& key, const std::string& name) {
  auto waiting = stop_waiting(self->state, key);
  auto r = adopt(self, key, name);
  for (auto call : waiting) answer(self, call, r);
}

/// Asks every healthy server whether it holds the session (actors/holder_search);
/// the answer comes back as holder_atom.
void search_holder(self_ptr self, const std::string& key, const holder_query& q) {
  auto& st = self->state;
  std::vector<backend_index> candidates;
  for (std::size_t i = 0; i < st.backends.size(); ++i)
    if (st.backends[i]->reachable.load() && st.backends[i]->healthy.load() && !st.backends[i]->removed.load())
      candidates.push_back(static_cast<backend_index>(i));
  core::bump(global_router_stats().router_holder_searches_total);
  router_actor me = self;
  find_holder(st.backends, candidates, q, st.settings.backend_token, st.settings.search_timeout_ms,
              [me, key](std::optional<backend_index> b) {
                caf::anon_send(me, holder_atom::value, key, b ? std::int64_t{*b} : std::int64_t{-1});
              });
}

/// A session a server may hold, which neither table here binds: its key's
/// owner, which decided it (or learned it first), is asked whether it knows
/// the binding (lookup: it decides nothing, since a server may hold the
/// session). The servers are searched only when this replica owns the key,
/// or the owner does not know it, does not answer within ask_timeout, or
/// predates lookup.
void look_up_held(self_ptr self, const std::string& key, const holder_query& q) {
  const auto* owner = owner_peer(self->state, key);
  if (!owner || owner->protocol < lookup_protocol) return search_holder(self, key, q);
  core::bump(global_router_stats().router_owner_lookups_total);
  self->request(router_of(*owner), ask_timeout, lookup_atom::value, key)
      .then(
          [=](const std::string& name) {
            if (name.empty()) return search_holder(self, key, q);
            held_known(self, key, name);
          },
          [=, name = owner->name](const caf::error& e) {
            core::bump(global_router_stats().router_owner_lookups_failed_total);
            spdlog::get("router")->info("owner_lookup_failed owner={} error=\"{}\" reason=\"the key's owner did not "
                                        "say whether it knows a session a server may hold: searching the servers\"",
                                        name, self->system().render(e));
            search_holder(self, key, q);
          });
}

}  // namespace

/// A session the client has seen on a server: its binding here, else the
/// calls for it wait on one lookup or search (held_known, holder_found).
void resolve_held(self_ptr self, const std::string& key, const holder_query& q, call_id call) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return answer(self, call, {*b, {}});
  auto [it, first] = st.searching.try_emplace(key);
  it->second.push_back(call);
  if (!first) return;  // a lookup or search for this session is under way
  auto known = st.peers.empty() ? std::string() : replicated(st, make_key(key_kind::session, key));
  if (!known.empty()) return held_known(self, key, known);
  look_up_held(self, key, q);
}

/// A holder search's result: backend index `found`, or -1 when no server
/// holds the session (then it is a new session after all).
void holder_found(self_ptr self, const std::string& key, std::int64_t found) {
  auto& st = self->state;
  if (!st.searching.count(key)) return;
  auto waiting = stop_waiting(st, key);
  if (found < 0) {
    for (auto call : waiting) resolve_new(self, key, call);
    return;
  }
  const auto b = static_cast<backend_index>(found);
  core::bump(global_router_stats().router_sessions_found_total);
  spdlog::get("router")->info("session_found backend={} reason=\"a server still held a session scg had no "
                              "binding for\"", st.backends[b]->name);
  // In a cluster the key's owner confirms (a concurrent decision there stands).
  auto bind_found = [=](const std::string& name) {
    auto r = adopt(self, key, name);
    if (r.backend) replicate_put(self, make_key(key_kind::session, key), self->state.backends[*r.backend]->name);
    for (auto call : waiting) answer(self, call, r);
  };
  const auto* owner = owner_peer(st, key);
  if (!st.cluster || !owner) return bind_found(st.backends[b]->name);
  const auto name = st.backends[b]->name;
  self->request(router_of(*owner), ask_timeout, decide_atom::value, key, name)
      .then([=](const std::string& in_force) { bind_found(in_force.empty() ? name : in_force); },
            [=](const caf::error&) { bind_found(name); });
}

}  // namespace scg::actors::routing

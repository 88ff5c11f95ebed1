// The router's placement: admitting a new session, deciding its backend,
// binding and replicating it; rebinding off a lost backend; a clone's binding.
#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <vector>

#include "actors/placement.hpp"
#include "actors/router_state.hpp"
#include "actors/router_stats.hpp"
#include "core/audit.hpp"
#include "core/events.hpp"
#include "core/metrics.hpp"
#include "core/replicated_key.hpp"
#include "core/usage.hpp"

namespace scg::actors::routing {

using core::key_kind;
using core::make_key;

namespace {

/// The backend pool of the tenant in session key `key`; nullptr: all backends.
const std::vector<std::string>* pool_of(const router_state& st, const std::string& key) {
  if (st.settings.pools.empty()) return nullptr;
  auto k = session_key::parse(key);
  auto it = k ? st.settings.pools.find(k->tenant) : st.settings.pools.end();
  return it == st.settings.pools.end() ? nullptr : &it->second;
}

/// Placement's view of the backends right now, for a session of `key`'s tenant.
std::vector<candidate> candidates(const router_state& st, const std::string& key) {
  auto bound = st.table->sessions_per_backend(st.backends.size());
  const auto* pool = pool_of(st, key);
  std::vector<candidate> out;
  out.reserve(st.backends.size());
  for (std::size_t i = 0; i < st.backends.size(); ++i) {
    const auto& b = *st.backends[i];
    out.push_back({eligible(b) && in_pool(pool, b.name), i < bound.size() ? bound[i] : 0, polled_utilization(b)});
  }
  return out;
}

constexpr int shed_retry_ms = 5000;  // a new session refused for load: try again in a while

/// Refuses a new session of `key` when its tenant holds limits.max_sessions
/// sessions cluster-wide, or when every backend it may use scores above
/// placement.shed_above; nullopt admits it.
std::optional<route_result> refuse_new(const router_state& st, const std::string& key) {
  auto k = session_key::parse(key);
  const std::string tenant = k ? k->tenant : std::string();
  const auto cap = st.settings.limits.for_tenant(tenant).max_sessions;
  if (cap > 0 && st.table->sessions_of_tenant(tenant) >= static_cast<std::size_t>(cap)) {
    core::record_event("refused", "a new session of tenant " + tenant + " was refused: limits.max_sessions reached");
    core::audit("session.refused", {{"tenant", tenant}, {"user", k ? k->user_id : ""},
                                    {"session", k ? k->session_id : ""}, {"reason", "max_sessions"}});
    return route_result{std::nullopt,
                        "scg: tenant " + tenant + " has " + std::to_string(cap) +
                            " live sessions, its limit (limits.max_sessions); release one or retry later",
                        core::local_reason::sessions_full, shed_retry_ms};
  }
  if (st.settings.shed_above && all_above(st.settings.policy, candidates(st, key), *st.settings.shed_above)) {
    core::record_event("shed", "a new session of tenant " + tenant + " was shed: every backend above placement.shed_above");
    core::global_pool_sheds().add(st.settings.pools.count(tenant) ? std::string_view(tenant) : all_pool);
    core::audit("session.shed", {{"tenant", tenant}, {"user", k ? k->user_id : ""},
                                 {"session", k ? k->session_id : ""}});
    return route_result{std::nullopt,
                        "scg: every backend is too busy for a new session (scores above placement.shed_above); "
                        "retry later",
                        core::local_reason::sessions_shed, shed_retry_ms};
  }
  return std::nullopt;
}

/// Why no backend can take a new session, naming the first few.
std::string no_backend_message(const router_state& st) {
  constexpr std::size_t named = 5;
  std::string out = "scg: no backend can take a new session:";
  for (std::size_t i = 0; i < st.backends.size() && i < named; ++i) {
    const auto& b = *st.backends[i];
    out += (i ? ", " : " ") + b.name + " (" + b.address + ") " +
           (b.draining.load() ? "draining" : !b.reachable.load() ? "unreachable" : "unhealthy");
  }
  if (st.backends.size() > named)
    out += " and " + std::to_string(st.backends.size() - named) + " more";
  return out;
}

}  // namespace

backend_index bind(self_ptr self, const std::string& key, backend_index backend) {
  auto& st = self->state;
  auto bound = st.table->bind_session(key, backend, now_ms());
  st.sessions.try_emplace(key);
  return bound;
}

void replicate_put(self_ptr self, std::string key, std::string value, std::string session, std::uint64_t started_ms) {
  replicate(self, put_atom::value, std::move(key), std::move(value), std::move(session), started_ms);
}

/// This replica decides: placement, binding, replication. Re-checks the
/// table first: a decision made while we waited on an answer stands. The
/// session was admitted (refuse_new) by the replica the call arrived at, so
/// an owner deciding for a peer never refuses what that peer let in, not even
/// while it shuts down (`for_peer`: a rolling restart would fail new sessions
/// at the other replicas for the length of the drain).
route_result decide_here(self_ptr self, const std::string& key, bool is_new, bool for_peer) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return {*b, {}};
  if (!st.accepting && !for_peer) return router_gone();
  auto pick = place(st.settings.policy, candidates(st, key), st.cursor);
  if (!pick) {
    return {std::nullopt, no_backend_message(st)};
  }
  core::bump(global_router_stats().router_decisions_total);
  auto b = bind(self, key, static_cast<backend_index>(*pick));
  replicate_put(self, make_key(key_kind::session, key), st.backends[b]->name);
  auto k = session_key::parse(key);
  if (k && is_new) core::global_usage().record_session(k->tenant, k->user_id, wall_now_ms());
  if (k)
    core::audit(is_new ? "session.create" : "session.rebind",
                {{"tenant", k->tenant}, {"user", k->user_id}, {"session", k->session_id},
                 {"backend", st.backends[b]->name}});
  return {b, {}};
}

std::string replicated(const router_state& st, const std::string& key) {
  return st.cluster && st.settings.replicated.backend ? st.settings.replicated.backend(key) : std::string();
}

bool released(const router_state& st, const std::string& key) {
  return st.cluster && st.settings.replicated.released && st.settings.replicated.released(key);
}

/// A peer named `name` as the session's backend: bind it here too. Unless
/// the session was released here meanwhile (the peer's answer or a clone's
/// announcement crossed the release's tombstone): the call goes there, but
/// the binding is not kept, or it would outlive the release in this
/// replica's table alone.
route_result adopt(self_ptr self, const std::string& key, const std::string& name) {
  auto b = find_backend(self->state.backends, name);
  if (!b) return decide_here(self, key);  // backend lists differ: the cluster actor logs it
  if (released(self->state, make_key(key_kind::session, key))) {
    core::bump(global_router_stats().router_late_bindings_total);
    spdlog::get("router")->debug("late_binding backend={} reason=\"a peer named the backend of a session "
                                 "released here since\"", name);
    return {*b, {}};
  }
  return {bind(self, key, *b), {}};
}

/// A session this replica has no binding for: the cluster may know it, else
/// it is new (admitted, then placed by its key's owner).
void resolve_new(self_ptr self, const std::string& key, call_id call) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return answer(self, call, {*b, {}});
  if (!st.accepting) return answer(self, call, router_gone());
  if (auto refused = refuse_new(st, key)) return answer(self, call, *refused);
  if (st.cluster && !st.peers.empty()) return resolve_in_cluster(self, key, call);
  answer(self, call, decide_here(self, key));
}

/// Moves `key` off the lost backend it is bound to: a new placement,
/// replicated, audited.
void rebind(self_ptr self, const std::string& key, call_id call) {
  auto& st = self->state;
  auto old = st.table->find_session(key, now_ms());
  // Another call may have rebound it already: then the binding stands.
  if (old && eligible(*st.backends[*old])) return answer(self, call, {*old, {}});
  if (old) {
    // Deleted first, then bound anew: peers see a deliberate move, not
    // two replicas disagreeing (which they would count as a conflict).
    st.table->erase_session(key);
    replicate(self, erase_atom::value, make_key(key_kind::session, key));
  }
  auto r = decide_here(self, key, false);
  if (r.backend) {
    core::bump(global_router_stats().router_rebinds_total);
    const auto from = old ? st.backends[*old]->name : std::string("?");
    spdlog::get("router")->info("session_rebound from={} to={}", from, st.backends[*r.backend]->name);
    core::record_event("rebind", "a session moved from lost backend " + from + " to " +
                                     st.backends[*r.backend]->name);
  }
  answer(self, call, r);
}

/// CloneSession's new session `key`, bound to the original's `backend`
/// unless bound. The clone's first call may reach any replica the moment the
/// client has its answer: the key's owner, whom a replica without the
/// binding asks, learns it before the answer goes out.
void bind_clone(self_ptr self, const std::string& key, backend_index backend, call_id call) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return answer(self, call, {*b, {}});
  core::bump(global_router_stats().router_clones_bound_total);
  bind(self, key, backend);
  const auto& name = st.backends[backend]->name;
  replicate_put(self, make_key(key_kind::session, key), name);
  const auto* owner = owner_peer(st, key);
  if (!st.cluster || !owner) return answer(self, call, {backend, {}});
  self->request(router_of(*owner), ask_timeout, decide_atom::value, key, name)
      .then([=](const std::string&) { answer(self, call, {backend, {}}); },
            [=](const caf::error&) {
              core::bump(global_router_stats().router_owner_unreachable_total);
              answer(self, call, {backend, {}});
            });
}

}  // namespace scg::actors::routing

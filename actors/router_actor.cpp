#include "actors/protocol.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/drain_status.hpp"
#include "actors/holder_search.hpp"
#include "actors/placement.hpp"
#include "actors/session_directory.hpp"
#include "core/rendezvous.hpp"
#include "core/audit.hpp"
#include "core/events.hpp"
#include "core/metrics.hpp"
#include "core/pacing.hpp"
#include "core/replicated_key.hpp"
#include "core/usage.hpp"

namespace scg::actors {

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
  // The cluster, when there is one: our cluster actor and the live peers'
  // routers (self excluded), as the cluster actor last told us.
  replication_actor cluster;
  std::vector<std::string> member_names;
  std::vector<caf::actor> member_routers;
  std::vector<std::uint32_t> member_protocols;  ///< the newest cluster protocol each announced
  std::vector<std::string> owner_names;  ///< who owns keys (owners()): synced members, self included once synced
  std::int64_t membership_changed_ms = 0;  ///< wall ms of the last membership change, as the cluster actor said
  /// Searches for the holder of a forgotten session under way: the calls waiting on each.
  std::unordered_map<std::string, std::vector<route_callback>> searching;
  static inline const char* name = "router";
};

namespace {

using core::key_kind;
using core::make_key;

constexpr auto op_sweep_interval = std::chrono::seconds(1);  // also the tick that starts session sweeps
constexpr std::size_t sweep_buckets = 32;   // buckets of the session directory per look at the clock
constexpr auto sweep_step_budget = std::chrono::microseconds(300);  // the router's time per sweep step, about
constexpr double sweep_share = 0.1;         // of one core, at most, for an idle-session sweep (sweep_step)

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

using self_ptr = router_actor::stateful_pointer<router_state>;

/// Binds `key` to `backend`; its actor starts with its first operation.
backend_index bind(self_ptr self, const std::string& key, backend_index backend) {
  auto& st = self->state;
  auto bound = st.table->bind_session(key, backend, now_ms());
  st.sessions.try_emplace(key);
  return bound;
}

constexpr auto ask_timeout = std::chrono::milliseconds(1000);

/// The router of the member `it` points at (into member_names), typed.
peer_router_actor peer_of(const router_state& st, std::vector<std::string>::const_iterator it) {
  return caf::actor_cast<peer_router_actor>(st.member_routers[static_cast<std::size_t>(it - st.member_names.begin())]);
}

/// Replicates a local write through the cluster actor, when there is one.
template <class... Ts>
void replicate(self_ptr self, Ts&&... xs) {
  if (self->state.cluster) self->send(self->state.cluster, std::forward<Ts>(xs)...);
}

/// Replicates `key` → `value`; an operation's entry also names its session
/// and its start (wall ms).
void replicate_put(self_ptr self, std::string key, std::string value, std::string session = {},
                   std::uint64_t started_ms = 0) {
  replicate(self, put_atom::value, std::move(key), std::move(value), std::move(session), started_ms);
}

/// This replica decides: placement, binding, replication. Re-checks the
/// table first: a decision made while we waited on an answer stands. The
/// session was admitted (refuse_new) by the replica the call arrived at, so
/// an owner deciding for a peer never refuses what that peer let in, not even
/// while it shuts down (`for_peer`: a rolling restart would fail new sessions
/// at the other replicas for the length of the drain).
route_result decide_here(self_ptr self, const std::string& key, bool is_new = true, bool for_peer = false) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return {*b, {}};
  if (!st.accepting && !for_peer)
    return {std::nullopt, "scg: replica is shutting down", core::local_reason::shutting_down};
  auto pick = place(st.settings.policy, candidates(st, key), st.cursor);
  if (!pick) {
    return {std::nullopt, no_backend_message(st)};
  }
  core::bump(core::global_metrics().router_decisions_total);
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

/// The backend the replicated table binds `key` to; empty when none, or
/// when this replica is not in a cluster.
std::string replicated(const router_state& st, const std::string& key) {
  return st.cluster && st.settings.replicated.backend ? st.settings.replicated.backend(key) : std::string();
}

/// Whether the replicated table holds a release's tombstone for `key`.
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
    core::bump(core::global_metrics().router_late_bindings_total);
    spdlog::get("router")->debug("late_binding backend={} reason=\"a peer named the backend of a session "
                                 "released here since\"", name);
    return {*b, {}};
  }
  return {bind(self, key, *b), {}};
}

/// The replicas among which each key has its owner: those whose first sync
/// is over (self included), as the cluster actor last said; all of them
/// while none is (a cluster starting together).
std::vector<std::string> owners(const router_state& st) {
  if (!st.owner_names.empty()) return st.owner_names;
  auto all = st.member_names;
  all.push_back(st.settings.node_name);
  return all;
}

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
/// and deciding here would bind the session a second time.
void decide_via_owner(self_ptr self, const std::string& key, route_callback done, bool asked_again = false) {
  auto& st = self->state;
  const auto all = owners(st);
  auto owner = core::owner_of(key, all);
  auto it = std::find(st.member_names.begin(), st.member_names.end(), owner);
  if (it == st.member_names.end()) return done(decide_here(self, key));
  auto owner_router = peer_of(st, it);
  const auto observe = [asked = std::chrono::steady_clock::now()] {
    auto& m = core::global_metrics();
    m.owner_answer.observe(m.decision_bounds_us,
                           static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                          std::chrono::steady_clock::now() - asked)
                                                          .count()));
  };
  self->request(owner_router, ask_timeout, decide_atom::value, key)
      .then(
          [=](const std::string& name) {
            observe();
            // No answer: the owner found no backend, or (before 0.2.0) it was
            // shutting down. This replica decides; with no backend it says so.
            if (name.empty()) return done(decide_here(self, key));
            auto r = adopt(self, key, name);
            // The owner replicates its decision; should it die or freeze
            // before that leaves it, this replica writes it (confirm_atom).
            if (r.backend) self->delayed_send(self, confirm_after, confirm_atom::value, key, name);
            done(r);
          },
          [=, asked = now_ms()](const caf::error&) {
            observe();
            if (!asked_again && now_ms() - asked > stalled_after.count()) {
              core::bump(core::global_metrics().router_owner_asked_again_total);
              return decide_via_owner(self, key, done, true);
            }
            core::bump(core::global_metrics().router_owner_unreachable_total);
            done(decide_here(self, key));
          });
}

/// Resolves a session this replica has no binding for: the replicated table
/// may hold it (bound elsewhere, or forgotten here when idle), else its
/// owner decides.
void resolve_in_cluster(self_ptr self, const std::string& key, route_callback done) {
  if (auto name = replicated(self->state, make_key(key_kind::session, key)); !name.empty()) return done(adopt(self, key, name));
  decide_via_owner(self, key, done);
}

/// The first peer protocol that answers where_op (cluster/protocol_version.hpp).
constexpr std::uint32_t where_op_protocol = 2;

/// How long a replica that finds nobody knowing an operation id, while the
/// cluster settles and under a session it does not know either, looks again
/// before it refuses: the operation's delta and its session's (batched for
/// a few ms, 5 to 10 ms on their way) may be just behind the client, who
/// reattaches through another replica the moment a stream ends.
constexpr auto op_grace = std::chrono::milliseconds(200);
constexpr std::uint32_t op_looks = 4;  // op_grace / op_looks apart

/// Whether `key`'s binding is known here: the data path's table or the
/// replicated one. An operation runs on its session's backend, so the call
/// routes by session rather than being refused.
bool session_known(const router_state& st, const std::string& key) {
  return st.table->session_backend(key) || !replicated(st, make_key(key_kind::session, key)).empty();
}

/// Nobody knows operation `op_id`. While the cluster settles (a member came
/// or went within cluster.settle_ms, or a peer did not answer), the replica
/// that started it may be one not heard from yet: a refusal the client
/// retries (operation_unsettled; the forwarder applies it only to a call
/// whose session is unknown here too). Otherwise, or when the session `key`
/// is bound here, no backend and no error: the call routes by its session.
route_result nobody_knows(const router_state& st, const std::string& op_id, const std::string& key,
                          bool a_peer_failed) {
  const bool settling = wall_now_ms() < st.membership_changed_ms + st.settings.settle_ms;
  if ((!a_peer_failed && !settling) || session_known(st, key)) return {};
  route_result r;
  r.refusal = core::local_reason::operation_unsettled;
  r.error = "operation " + op_id.substr(0, 64) + " is not known to any replica heard from while the cluster " +
            (a_peer_failed ? "waits for a replica's answer" : "membership settles") + "; retry";
  return r;
}

/// The end of a search that found nobody knowing `op_id`: nobody_knows's
/// answer, or, for a refusal with looks left, another search op_grace /
/// op_looks later. A search that waited out a silent peer (ask_timeout)
/// has waited long enough for any delta.
void nobody_found(self_ptr self, const std::string& op_id, const std::string& key, const route_callback& done,
                  bool a_peer_failed, std::uint32_t looks_left) {
  auto r = nobody_knows(self->state, op_id, key, a_peer_failed);
  if (r.error.empty() || looks_left == 0 || a_peer_failed) return done(std::move(r));
  self->delayed_send(self, op_grace / op_looks, op_find_atom::value, op_id, key, done, looks_left - 1);
}

/// An operation id the data path's table missed, asked of every live peer
/// at once: the replica that saw the operation start holds it from before
/// its client could learn the id, whoever owns the key, while the entry's
/// delta may still be on its way. The first name wins; `done` hears it, or,
/// when nobody knows the id (within ask_timeout), nobody_found's answer.
void ask_peers_for_op(self_ptr self, const std::string& op_id, const std::string& key, const route_callback& done,
                      std::uint32_t looks_left) {
  struct search {
    route_callback done;
    std::string op_id, key;
    std::uint32_t looks_left = 0;
    std::size_t waiting = 0;
    bool answered = false;
    bool a_peer_failed = false;
  };
  auto s = std::make_shared<search>(search{done, op_id, key, looks_left});
  auto on_answer = [self, s](const std::string& name, bool failed) {
    if (s->answered) return;
    --s->waiting;
    s->a_peer_failed = s->a_peer_failed || failed;
    if (auto b = name.empty() ? std::nullopt : find_backend(self->state.backends, name)) {
      s->answered = true;
      core::bump(core::global_metrics().router_operations_found_total);
      return s->done({*b, {}});
    }
    if (s->waiting == 0) {
      s->answered = true;
      nobody_found(self, s->op_id, s->key, s->done, s->a_peer_failed, s->looks_left);
    }
  };
  auto& st = self->state;
  for (std::size_t i = 0; i < st.member_routers.size(); ++i)
    if (i < st.member_protocols.size() && st.member_protocols[i] >= where_op_protocol) ++s->waiting;
  if (s->waiting == 0) return nobody_found(self, op_id, key, done, false, looks_left);
  for (std::size_t i = 0; i < st.member_routers.size(); ++i) {
    if (i >= st.member_protocols.size() || st.member_protocols[i] < where_op_protocol) continue;
    self->request(caf::actor_cast<peer_router_actor>(st.member_routers[i]), ask_timeout, where_op_atom::value, op_id)
        .then([=](const std::string& name) { on_answer(name, false); },
              [=](const caf::error&) { on_answer({}, true); });
  }
}

/// Resolves an operation id the data path's table missed before anything is
/// placed: the replicated table, then the peers (ask_peers_for_op). No
/// backend and no error: nobody knows it, the call routes by its session
/// `key`; a refusal: nobody knows it, nor the session, while the cluster
/// settles (nobody_knows), after `looks_left` more looks.
void find_op(self_ptr self, const std::string& op_id, const std::string& key, const route_callback& done,
             std::uint32_t looks_left) {
  auto& st = self->state;
  if (auto op = st.table->find_op(op_id, now_ms())) return done({op->backend, {}});
  if (!st.cluster) return done({});
  const auto name = replicated(st, make_key(key_kind::operation, op_id));
  if (auto b = name.empty() ? std::nullopt : find_backend(st.backends, name)) {
    core::bump(core::global_metrics().router_operations_found_total);
    return done({*b, {}});
  }
  ask_peers_for_op(self, op_id, key, done, looks_left);
}

/// Sends `msg` on to the session actor of `key`, if it lives.
template <class... Ts>
void to_session(self_ptr self, const std::string& key, Ts&&... xs) {
  if (auto* s = self->state.sessions.find(key); s && *s) self->send(*s, std::forward<Ts>(xs)...);
}

/// Forgets an idle session (no actor): its binding and its directory entry.
void forget_idle(self_ptr self, const std::string& key) {
  self->state.table->erase_session(key);
  self->state.sessions.erase(key);
}

/// A session this replica has no binding for: the cluster may know it, else
/// it is new (admitted, then placed by its key's owner).
void resolve_new(self_ptr self, const std::string& key, const route_callback& done) {
  auto& st = self->state;
  if (auto b = st.table->find_session(key, now_ms())) return done({*b, {}});
  if (!st.accepting) return done({std::nullopt, "scg: replica is shutting down", core::local_reason::shutting_down});
  if (auto refused = refuse_new(st, key)) return done(*refused);
  if (st.cluster && !st.member_names.empty()) return resolve_in_cluster(self, key, done);
  done(decide_here(self, key));
}

/// One step of the idle-session sweep: the sessions of the directory's next
/// buckets, for about sweep_step_budget of the router's time (a step of a
/// fixed 512 buckets took 2 to 17 ms at a million sessions on a busy 2-core
/// machine, and the decisions queued behind it: docs/cluster.md, Measured).
/// Each step queues the next behind what arrived meanwhile, no sooner than
/// keeps the sweep's work to sweep_share of one core: placement waits for
/// one short step, never for a pass over a million sessions, and the
/// router's thread stays mostly idle. A rehash between steps moves sessions
/// between buckets: the sweep may miss some, which the next one catches.
void sweep_step(self_ptr self) {
  const auto began = std::chrono::steady_clock::now();
  auto& st = self->state;
  if (!st.sweep) return;
  const auto now = now_ms();
  std::vector<std::string> idle;
  const auto visit = [&](const std::string& key, session_actor& s) {
    auto last = st.table->session_last_seen(key);
    if (last && now - *last < st.settings.session_ttl_ms) return;
    if (s) {
      self->send(s, expire_atom::value);  // it checks again and forgets its operations
    } else {
      spdlog::get("router")->debug("session_expired idle_ms={}", last ? now - *last : -1);
      idle.push_back(key);
    }
  };
  do {
    st.sweep = st.sessions.for_each_step(*st.sweep, sweep_buckets, visit);
  } while (!st.sweep->done() && std::chrono::steady_clock::now() - began < sweep_step_budget);
  for (const auto& key : idle)
    if (auto* s = st.sessions.find(key); s && !*s) {
      core::bump(core::global_metrics().router_sessions_expired_total);
      forget_idle(self, key);
    }
  if (st.sweep->done()) return st.sweep.reset();
  using std::chrono::duration_cast;
  using us = std::chrono::microseconds;
  const auto now_steady = std::chrono::steady_clock::now();
  st.sweep_work += duration_cast<us>(now_steady - began);
  const auto wait = core::pace_delay(st.sweep_work, duration_cast<us>(now_steady - st.sweep_started), sweep_share);
  if (wait.count() > 0) return self->delayed_send(self, wait, sweep_atom::value);
  self->send(self, sweep_atom::value);
}

/// The first peer protocol that answers lookup (cluster/protocol_version.hpp:
/// 0.2.0's; a v0.1.0 peer is never asked).
constexpr std::uint32_t lookup_protocol = 4;

/// The calls waiting for the holder of `key` hear that `name` binds it.
void held_known(self_ptr self, const std::string& key, const std::string& name) {
  auto waiting = std::move(self->state.searching[key]);
  self->state.searching.erase(key);
  auto r = adopt(self, key, name);
  for (auto& d : waiting) d(r);
}

/// Asks every healthy server whether it holds the session (actors/holder_search);
/// the answer comes back as holder_atom.
void search_holder(self_ptr self, const std::string& key, const holder_query& q) {
  auto& st = self->state;
  std::vector<backend_index> candidates;
  for (std::size_t i = 0; i < st.backends.size(); ++i)
    if (st.backends[i]->reachable.load() && st.backends[i]->healthy.load() && !st.backends[i]->removed.load())
      candidates.push_back(static_cast<backend_index>(i));
  core::bump(core::global_metrics().router_holder_searches_total);
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
  auto& st = self->state;
  const auto all = owners(st);
  auto it = std::find(st.member_names.begin(), st.member_names.end(), core::owner_of(key, all));
  const auto i = static_cast<std::size_t>(it - st.member_names.begin());
  if (it == st.member_names.end() || i >= st.member_protocols.size() || st.member_protocols[i] < lookup_protocol)
    return search_holder(self, key, q);
  core::bump(core::global_metrics().router_owner_lookups_total);
  self->request(peer_of(st, it), ask_timeout, lookup_atom::value, key)
      .then(
          [=](const std::string& name) {
            if (name.empty()) return search_holder(self, key, q);
            held_known(self, key, name);
          },
          [=, owner = *it](const caf::error& e) {
            core::bump(core::global_metrics().router_owner_lookups_failed_total);
            spdlog::get("router")->info("owner_lookup_failed owner={} error=\"{}\" reason=\"the key's owner did not "
                                        "say whether it knows a session a server may hold: searching the servers\"",
                                        owner, self->system().render(e));
            search_holder(self, key, q);
          });
}

router_actor::behavior_type router_behavior(self_ptr self, router_settings settings,
                                            std::shared_ptr<session_table> table, backend_list backends) {
  auto& st = self->state;
  st.settings = settings;
  st.table = std::move(table);
  st.backends = std::move(backends);
  self->set_exit_handler([=](const caf::exit_msg& msg) {
    self->state.sessions.for_each([&](const std::string&, session_actor& session) {
      if (session) self->send_exit(session, msg.reason);
    });
    self->quit(msg.reason);
  });
  self->delayed_send(self, op_sweep_interval, tick_atom::value);
  return {
      [=](bind_atom, const std::string& key, const route_callback& done) { resolve_new(self, key, done); },
      [=](held_atom, const std::string& key, const route_callback& done, const std::string& session,
          const std::string& user, const std::string& observed) {
        auto& st = self->state;
        if (auto b = st.table->find_session(key, now_ms())) return done({*b, {}});
        auto [it, first] = st.searching.try_emplace(key);
        it->second.push_back(done);
        if (!first) return;  // a lookup or search for this session is under way
        auto known = st.member_names.empty() ? std::string() : replicated(st, make_key(key_kind::session, key));
        if (!known.empty()) return held_known(self, key, known);
        look_up_held(self, key, {session, user, observed});
      },
      [=](holder_atom, const std::string& key, std::int64_t found) {
        auto& st = self->state;
        auto it = st.searching.find(key);
        if (it == st.searching.end()) return;
        auto waiting = std::move(it->second);
        st.searching.erase(it);
        if (found < 0) {  // no server holds it: a new session after all
          for (auto& d : waiting) resolve_new(self, key, d);
          return;
        }
        const auto b = static_cast<backend_index>(found);
        core::bump(core::global_metrics().router_sessions_found_total);
        spdlog::get("router")->info("session_found backend={} reason=\"a server still held a session scg had no "
                                    "binding for\"", st.backends[b]->name);
        // In a cluster the key's owner confirms (a concurrent decision there stands).
        auto bind_found = [=](const std::string& name) {
          auto r = adopt(self, key, name);
          if (r.backend) replicate_put(self, make_key(key_kind::session, key), self->state.backends[*r.backend]->name);
          for (auto& d : waiting) d(r);
        };
        const auto all = owners(st);
        auto owner = std::find(st.member_names.begin(), st.member_names.end(), core::owner_of(key, all));
        if (!st.cluster || owner == st.member_names.end()) return bind_found(st.backends[b]->name);
        auto owner_router = peer_of(st, owner);
        const auto name = st.backends[b]->name;
        self->request(owner_router, ask_timeout, decide_atom::value, key, name)
            .then([=](const std::string& in_force) { bind_found(in_force.empty() ? name : in_force); },
                  [=](const caf::error&) { bind_found(name); });
      },
      [=](confirm_atom, const std::string& key, const std::string& name) {
        // An owner's answer, bound here a moment ago: if its write has not
        // arrived (the owner died or froze right after deciding), nor any
        // newer write or release, this replica writes the binding, so the
        // others know it too and do not decide it again.
        auto& st = self->state;
        const auto full = make_key(key_kind::session, key);
        if (!replicated(st, full).empty() || released(st, full)) return;
        auto b = st.table->session_backend(key);
        if (!b || st.backends[*b]->name != name) return;  // released or rebound here meanwhile
        core::bump(core::global_metrics().router_decisions_confirmed_total);
        replicate_put(self, full, name);
      },
      [=](decide_atom, const std::string& key) -> caf::result<std::string> {
        // A peer asks us, the key's owner, to decide.
        auto& st = self->state;
        if (st.leaving) return caf::make_error(caf::sec::request_receiver_down);
        if (auto b = st.table->find_session(key, now_ms())) return st.backends[*b]->name;
        const auto name = replicated(st, make_key(key_kind::session, key));
        const auto r = name.empty() ? decide_here(self, key, true, true) : adopt(self, key, name);
        return r.backend ? st.backends[*r.backend]->name : std::string();
      },
      [=](members_atom, std::vector<std::string>& names, std::vector<caf::actor>& routers,
          std::vector<std::uint32_t>& protocols, std::vector<std::string>& owner_names, std::int64_t changed_ms) {
        auto& st = self->state;
        st.membership_changed_ms = changed_ms;
        st.cluster = caf::actor_cast<replication_actor>(self->current_sender());
        st.member_names = std::move(names);
        st.member_routers = std::move(routers);
        st.member_protocols = std::move(protocols);
        st.owner_names = std::move(owner_names);
        if (st.settings.on_members) st.settings.on_members(st.member_names.size() + 1);
      },
      [=](rebind_atom, const std::string& key, const route_callback& done) {
        auto& st = self->state;
        auto old = st.table->find_session(key, now_ms());
        // Another call may have rebound it already: then the binding stands.
        if (old && eligible(*st.backends[*old])) return done({*old, {}});
        if (old) {
          // Deleted first, then bound anew: peers see a deliberate move, not
          // two replicas disagreeing (which they would count as a conflict).
          st.table->erase_session(key);
          replicate(self, erase_atom::value, make_key(key_kind::session, key));
        }
        auto r = decide_here(self, key, false);
        if (r.backend) {
          core::bump(core::global_metrics().router_rebinds_total);
          const auto from = old ? st.backends[*old]->name : std::string("?");
          spdlog::get("router")->info("session_rebound from={} to={}", from, st.backends[*r.backend]->name);
          core::record_event("rebind", "a session moved from lost backend " + from + " to " +
                                           st.backends[*r.backend]->name);
        }
        done(r);
      },
      [=](owner_atom, const std::string& key) -> bool {
        auto& st = self->state;
        if (!st.cluster || st.member_names.empty()) return true;
        const auto all = owners(st);
        return core::owner_of(key, all) == st.settings.node_name;
      },
      [=](health_atom, const std::string& name, bool healthy) {
        replicate_put(self, make_key(key_kind::health, name), core::health_value(healthy));
      },
      [=](load_atom, const std::string& name, double utilization) {
        replicate_put(self, make_key(key_kind::load, name), core::load_value(utilization));
      },
      [=](clone_atom, const std::string& key, backend_index backend, const route_callback& done) {
        auto& st = self->state;
        if (auto b = st.table->find_session(key, now_ms())) return done({*b, {}});
        core::bump(core::global_metrics().router_clones_bound_total);
        bind(self, key, backend);
        const auto& name = st.backends[backend]->name;
        replicate_put(self, make_key(key_kind::session, key), name);
        // The clone's first call may reach any replica the moment the client
        // has its answer: the key's owner, whom a replica without the binding
        // asks, learns it before the answer goes out.
        const auto all = owners(st);
        auto it = std::find(st.member_names.begin(), st.member_names.end(), core::owner_of(key, all));
        if (!st.cluster || it == st.member_names.end()) return done({backend, {}});
        auto owner_router = peer_of(st, it);
        self->request(owner_router, ask_timeout, decide_atom::value, key, name)
            .then([=](const std::string&) { done({backend, {}}); },
                  [=](const caf::error&) {
                    core::bump(core::global_metrics().router_owner_unreachable_total);
                    done({backend, {}});
                  });
      },
      [=](decide_atom, const std::string& key, const std::string& name) -> caf::result<std::string> {
        // A peer bound a clone and tells us, the key's owner, before its client hears of it.
        auto& st = self->state;
        if (st.leaving) return caf::make_error(caf::sec::request_receiver_down);
        if (auto b = st.table->find_session(key, now_ms())) return st.backends[*b]->name;
        auto r = adopt(self, key, name);  // not kept if released meanwhile (the news waited out a partition)
        return r.backend ? st.backends[*r.backend]->name : std::string();
      },
      [=](op_find_atom, const std::string& op_id, const std::string& key, const route_callback& done,
          std::uint32_t looks_left) { find_op(self, op_id, key, done, looks_left); },
      [=](lookup_atom, const std::string& key) -> std::string {
        // A peer missed this session on its held path: our binding, read
        // without touching it; never a decision (a server may hold it).
        auto& st = self->state;
        if (auto b = st.table->session_backend(key)) return st.backends[*b]->name;
        return replicated(st, make_key(key_kind::session, key));
      },
      [=](where_op_atom, const std::string& op_id) -> std::string {
        // A peer's data path missed this operation id: our table's answer.
        auto& st = self->state;
        auto op = st.table->find_op(op_id, now_ms());
        return op ? st.backends[op->backend]->name : std::string();
      },
      [=](op_atom, const std::string& key, std::string& op_id) {
        auto& st = self->state;
        if (auto op = st.table->find_op(op_id, now_ms()))
          replicate_put(self, make_key(key_kind::operation, op_id), st.backends[op->backend]->name, key,
                        static_cast<std::uint64_t>(op->started_wall_ms));
        // A session of this replica gets its actor with its first live operation.
        if (auto* s = st.sessions.find(key); s && !*s)
          *s = spawn_session(self, key, st.table, st.settings.session_ttl_ms, self);
        to_session(self, key, op_atom::value, std::move(op_id));
      },
      [=](op_done_atom, const std::string& key, std::string& op_id) {
        replicate(self, erase_atom::value, make_key(key_kind::operation, op_id));
        to_session(self, key, op_done_atom::value, std::move(op_id));
      },
      [=](release_atom, const std::string& key) {
        // Forgotten here at once, whether or not this replica runs the
        // session's actor (a binding learned from a peer has none here).
        core::bump(core::global_metrics().router_sessions_released_total);
        self->state.table->erase_session(key);
        replicate(self, release_atom::value, make_key(key_kind::session, key));
        if (auto* s = self->state.sessions.find(key); s && !*s) self->state.sessions.erase(key);
        to_session(self, key, release_atom::value);
        if (auto k = session_key::parse(key))
          core::audit("session.release", {{"tenant", k->tenant}, {"user", k->user_id}, {"session", k->session_id}});
      },
      [=](forget_atom, const std::string& key) {
        // Released elsewhere in the cluster: forget it here too. Unless it is
        // bound again: a rebind replicates as a delete, then the new binding,
        // and the cluster actor may have applied both before this arrives.
        if (self->state.table->session_last_seen(key)) return;
        if (auto* s = self->state.sessions.find(key); s && !*s) return forget_idle(self, key);
        to_session(self, key, release_atom::value);
      },
      [=](ended_atom, const std::string& key) {
        // A new binding for the same key may already have a new actor.
        auto* s = self->state.sessions.find(key);
        if (s && *s && s->address() == self->current_sender()) self->state.sessions.erase(key);
      },
      [=](idle_atom, const std::string& key) {
        // The session's last operation ended: it stays, without an actor.
        auto* s = self->state.sessions.find(key);
        if (s && *s && s->address() == self->current_sender()) *s = nullptr;
      },
      [=](closing_atom) { self->state.accepting = false; },
      [=](leave_atom) -> caf::result<std::uint32_t, std::uint32_t> {
        // SIGTERM, the drain over. A decision taken for a peer from now on
        // might not leave this replica before it exits, and the asker alone
        // would know it: peers are refused and decide themselves (as when an
        // owner is unreachable). The cluster actor gets this after every write
        // sent before it, and pushes them all to the peers.
        auto& st = self->state;
        st.accepting = false;
        st.leaving = true;
        if (!st.cluster) return {std::uint32_t{0}, std::uint32_t{0}};
        return self->delegate(st.cluster, leave_atom::value);
      },
      [=](backend_atom, const std::string& name) {
        // A backend joined the running set: the cluster re-applies its entries.
        if (self->state.cluster) self->send(self->state.cluster, backend_atom::value, name);
      },
      [=](drain_atom, const std::string& name, bool on) {
        auto b = find_backend(self->state.backends, name);
        if (!b) return;
        self->state.backends[*b]->draining = on;
        spdlog::get("router")->info("backend_{} backend={}", on ? "draining" : "undrained", name);
        if (on)
          replicate_put(self, make_key(key_kind::drain, name), std::string(core::drain_value));
        else
          replicate(self, erase_atom::value, make_key(key_kind::drain, name));
      },
      [=](activity_atom, const std::string& name, const std::string& report) {
        const auto key = activity_key(self->state.settings.node_name, name);
        if (report.empty())
          replicate(self, erase_atom::value, key);
        else
          replicate_put(self, key, report);
      },
      [=](tick_atom) {
        auto& st = self->state;
        const auto now = now_ms();
        if (auto n = st.table->expire_ops(now, st.settings.op_ttl_ms, static_cast<bool>(st.cluster)); n > 0)
          core::bump(core::global_metrics().router_operations_expired_total, n);
        // One sweep for all sessions instead of a timer per session actor:
        // a timer costs more memory per idle session than the actor's state.
        // Every sixteenth of the ttl (1 s to 1 min): an idle session goes
        // from here that long after its ttl, plus the paced sweep's length.
        const auto every = std::clamp<std::int64_t>(st.settings.session_ttl_ms / 16000, 1, 60);
        if (st.ticks++ % static_cast<std::uint64_t>(every) == 0 && !st.sweep) {
          st.sweep.emplace();
          st.sweep_started = std::chrono::steady_clock::now();
          st.sweep_work = {};
          sweep_step(self);
        }
        self->delayed_send(self, op_sweep_interval, tick_atom::value);
      },
      [=](sweep_atom) { sweep_step(self); },
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, router_settings settings,
                          std::shared_ptr<session_table> table, backend_list backends) {
  return sys.spawn(router_behavior, settings, std::move(table), std::move(backends));
}

// --- router: the data path's door -------------------------------------------

struct router::impl {
  caf::actor_system& sys;
  config::health health;
  config::placement placement;
  std::shared_ptr<session_table> table;
  backend_list backends;
  router_ref actor;
  std::vector<caf::actor> backend_actors;  // grows with reloads; the entries stay (see backend_list)
  std::string probe_token;                 // what health probes present to backends

  void start_backend(backend_index i) {
    const auto& b = backends[i];
    backend_actors.push_back(caf::actor_cast<caf::actor>(spawn_backend(sys, b, i, table, health, actor.handle,
                                                                       probe_token)));
    if (!b->ui_url.empty())
      backend_actors.push_back(caf::actor_cast<caf::actor>(spawn_load_poller(
          sys, b, placement.ewma_alpha, std::chrono::milliseconds(placement.poll_interval_ms), actor.handle)));
  }
};

router::router(caf::actor_system& sys, const config::gateway& cfg, std::shared_ptr<session_table> table,
               backend_list backends, std::string backend_token, std::function<void(std::size_t)> on_members,
               replicated_view replicated)
    : impl_(std::make_unique<impl>(impl{sys, cfg.health, cfg.placement, table, backends, {}, {},
                                        std::move(backend_token)})) {
  router_settings s{};
  s.session_ttl_ms = std::int64_t{cfg.affinity.session_ttl_secs} * 1000;
  s.op_ttl_ms = std::int64_t{cfg.affinity.op_ttl_secs} * 1000;
  s.policy = make_policy(cfg.placement);
  s.node_name = cfg.cluster ? cfg.cluster->node_name : std::string();
  s.shed_above = cfg.placement.shed_above;
  s.on_members = std::move(on_members);
  s.replicated = std::move(replicated);
  s.limits = cfg.limits;
  for (const auto& [tenant, names] : cfg.security.tenants.pools) s.pools[tenant] = names;
  s.backend_token = impl_->probe_token;
  s.search_timeout_ms = cfg.health.timeout_ms;
  if (cfg.cluster) s.settle_ms = cfg.cluster->settle_ms;
  impl_->actor.handle = spawn_router(sys, s, table, backends);
  for (std::size_t i = 0; i < backends.size(); ++i) impl_->start_backend(static_cast<backend_index>(i));
}

void router::add_backend(backend_index index) const {
  impl_->start_backend(index);
  caf::anon_send(impl_->actor.handle, backend_atom::value, impl_->backends[index]->name);
}

router::~router() {
  caf::anon_send_exit(impl_->actor.handle, caf::exit_reason::user_shutdown);
  for (auto& a : impl_->backend_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

void router::resolve(std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, bind_atom::value, std::move(key), std::move(done));
}

void router::resolve_held(std::string key, std::string session_id, std::string spark_user, std::string observed,
                          route_callback done) const {
  caf::anon_send(impl_->actor.handle, held_atom::value, std::move(key), std::move(done), std::move(session_id),
                 std::move(spark_user), std::move(observed));
}

void router::rebind(std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, rebind_atom::value, std::move(key), std::move(done));
}

void router::bind_clone(std::string key, backend_index backend, route_callback done) const {
  caf::anon_send(impl_->actor.handle, clone_atom::value, std::move(key), backend, std::move(done));
}

void router::find_operation(std::string op_id, std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, op_find_atom::value, std::move(op_id), std::move(key), std::move(done),
                 op_looks);
}

void router::operation_started(std::string key, std::string op_id) const {
  caf::anon_send(impl_->actor.handle, op_atom::value, std::move(key), std::move(op_id));
}

void router::operation_released(std::string key, std::string op_id) const {
  caf::anon_send(impl_->actor.handle, op_done_atom::value, std::move(key), std::move(op_id));
}

void router::session_released(std::string key) const {
  caf::anon_send(impl_->actor.handle, release_atom::value, std::move(key));
}

const router_ref& router::actor() const { return impl_->actor; }

void router::stop_new_sessions() const { caf::anon_send(impl_->actor.handle, closing_atom::value); }

router::leave_result router::leave_cluster(std::chrono::milliseconds timeout) const {
  leave_result r;
  caf::scoped_actor self{impl_->sys};
  self->request(impl_->actor.handle, timeout, leave_atom::value)
      .receive(
          [&](std::uint32_t peers, std::uint32_t acknowledged) {
            r.peers = peers;
            r.acknowledged = acknowledged;
          },
          [&](const caf::error& e) { r.error = impl_->sys.render(e); });
  return r;
}

void router::publish_activity(std::string name, std::string report) const {
  caf::anon_send(impl_->actor.handle, activity_atom::value, std::move(name), std::move(report));
}

void router::set_draining(std::string name, bool on) const {
  caf::anon_send(impl_->actor.handle, drain_atom::value, std::move(name), on);
}

}  // namespace scg::actors

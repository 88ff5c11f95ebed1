// The router's session directory: session actors started with a session's
// first live operation and told of its operations and its release; the
// sweeps that expire operations and idle sessions; drains and the drain
// activity this replica publishes.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "actors/drain_status.hpp"
#include "actors/router_state.hpp"
#include "actors/router_stats.hpp"
#include "core/audit.hpp"
#include "core/metrics.hpp"
#include "core/pacing.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors::routing {

using core::key_kind;
using core::make_key;

namespace {

constexpr std::size_t sweep_buckets = 32;   // buckets of the session directory per look at the clock
constexpr auto sweep_step_budget = std::chrono::microseconds(300);  // the router's time per sweep step, about
constexpr double sweep_share = 0.1;         // of one core, at most, for an idle-session sweep (sweep_step)

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

}  // namespace

void operation_started(self_ptr self, const std::string& key, std::string& op_id) {
  auto& st = self->state;
  if (auto op = st.table->find_op(op_id, now_ms()))
    replicate_put(self, make_key(key_kind::operation, op_id), st.backends[op->backend]->name, key,
                  static_cast<std::uint64_t>(op->started_wall_ms));
  // A session of this replica gets its actor with its first live operation.
  if (auto* s = st.sessions.find(key); s && !*s)
    *s = spawn_session(self, key, st.table, st.settings.session_ttl_ms, self);
  to_session(self, key, op_atom::value, std::move(op_id));
}

void operation_released(self_ptr self, const std::string& key, std::string& op_id) {
  replicate(self, erase_atom::value, make_key(key_kind::operation, op_id));
  to_session(self, key, op_done_atom::value, std::move(op_id));
}

/// ReleaseSession: forgotten here at once, whether or not this replica runs
/// the session's actor (a binding learned from a peer has none here).
void release(self_ptr self, const std::string& key) {
  core::bump(global_router_stats().router_sessions_released_total);
  self->state.table->erase_session(key);
  replicate(self, release_atom::value, make_key(key_kind::session, key));
  if (auto* s = self->state.sessions.find(key); s && !*s) self->state.sessions.erase(key);
  to_session(self, key, release_atom::value);
  if (auto k = session_key::parse(key))
    core::audit("session.release", {{"tenant", k->tenant}, {"user", k->user_id}, {"session", k->session_id}});
}

/// Released elsewhere in the cluster: forget it here too. Unless it is bound
/// again: a rebind replicates as a delete, then the new binding, and the
/// cluster actor may have applied both before this arrives.
void forget(self_ptr self, const std::string& key) {
  if (self->state.table->session_last_seen(key)) return;
  if (auto* s = self->state.sessions.find(key); s && !*s) return forget_idle(self, key);
  to_session(self, key, release_atom::value);
}

/// A session actor forgot its session. A new binding for the same key may
/// already have a new actor.
void session_ended(self_ptr self, const std::string& key) {
  auto* s = self->state.sessions.find(key);
  if (s && *s && s->address() == self->current_sender()) self->state.sessions.erase(key);
}

/// The session's last operation ended: it stays, without an actor.
void session_idle(self_ptr self, const std::string& key) {
  auto* s = self->state.sessions.find(key);
  if (s && *s && s->address() == self->current_sender()) *s = nullptr;
}

void set_draining(self_ptr self, const std::string& name, bool on) {
  auto b = find_backend(self->state.backends, name);
  if (!b) return;
  self->state.backends[*b]->draining = on;
  spdlog::get("router")->info("backend_{} backend={}", on ? "draining" : "undrained", name);
  if (on)
    replicate_put(self, make_key(key_kind::drain, name), std::string(core::drain_value));
  else
    replicate(self, erase_atom::value, make_key(key_kind::drain, name));
}

void publish_activity(self_ptr self, const std::string& name, const std::string& report) {
  const auto key = activity_key(self->state.settings.node_name, name);
  if (report.empty())
    replicate(self, erase_atom::value, key);
  else
    replicate_put(self, key, report);
}

/// Every op_sweep_interval: expired operations go, and now and then a sweep
/// of idle sessions starts.
void tick(self_ptr self) {
  auto& st = self->state;
  const auto now = now_ms();
  if (auto n = st.table->expire_ops(now, st.settings.op_ttl_ms, static_cast<bool>(st.cluster)); n > 0)
    core::bump(global_router_stats().router_operations_expired_total, n);
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
      core::bump(global_router_stats().router_sessions_expired_total);
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

}  // namespace scg::actors::routing

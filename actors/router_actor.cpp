// The router actor: its behaviour, a table of one-line handlers calling the
// functions of router_state.hpp; the routed calls it owes an answer and
// their deadline; and actors::router, the data path's door to it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "actors/router_state.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors {

namespace routing {

namespace {

/// The answer of a call the router did not answer within `bound`: the
/// forwarder refuses it UNAVAILABLE (route_timeout), which clients retry,
/// and safely so: it never reached a backend.
route_result timed_out(std::chrono::milliseconds bound) {
  return {std::nullopt, "scg: the router gave no answer within " + std::to_string(bound.count()) +
                            " ms (its routing deadline); retry", core::local_reason::route_timeout};
}

/// Has a deadline_atom arrive when the oldest pending call is due; one at
/// a time, however many calls wait.
void arm_deadline(self_ptr self) {
  auto& st = self->state;
  if (st.deadline_armed || st.calls.empty()) return;
  st.deadline_armed = true;
  const auto wait = st.calls.begin()->second.deadline - self->clock().now();
  self->delayed_send(self, std::max(wait, decltype(wait){0}), deadline_atom::value);
}

}  // namespace

call_id admit(self_ptr self, const route_answer_ptr& in) {
  auto& st = self->state;
  const auto call = ++st.last_call;
  st.calls.emplace(call, pending_call{in ? std::move(*in) : route_answer{},
                                      self->clock().now() + st.settings.route_deadline});
  arm_deadline(self);
  return call;
}

void answer(self_ptr self, call_id call, route_result r) {
  auto it = self->state.calls.find(call);
  if (it == self->state.calls.end()) return;  // its deadline answered it
  auto done = std::move(it->second.answer);
  self->state.calls.erase(it);
  done(std::move(r));
}

/// A late answer finds its call gone (answer() drops it); what it decided
/// meanwhile (a binding) stands.
void check_deadlines(self_ptr self) {
  auto& st = self->state;
  st.deadline_armed = false;
  const auto now = self->clock().now();
  std::size_t late = 0;
  for (; !st.calls.empty() && st.calls.begin()->second.deadline <= now; ++late)
    answer(self, st.calls.begin()->first, timed_out(st.settings.route_deadline));
  if (late > 0)
    spdlog::get("router")->warn("route_timeout calls={} reason=\"no answer within the routing deadline\"", late);
  arm_deadline(self);
}

namespace {

using core::key_kind;
using core::make_key;

/// The router exits: its session actors with it. The calls it still owes an
/// answer go with its state, each answering shutting_down (route_answer).
void stop(self_ptr self, const caf::error& reason) {
  self->state.sessions.for_each([&](const std::string&, session_actor& session) {
    if (session) self->send_exit(session, reason);
  });
  self->quit(reason);
}

router_actor::behavior_type router_behavior(self_ptr self, router_settings settings,
                                            std::shared_ptr<session_table> table, backend_list backends) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.table = std::move(table);
  st.backends = std::move(backends);
  self->set_exit_handler([=](const caf::exit_msg& msg) { stop(self, msg.reason); });
  self->delayed_send(self, op_sweep_interval, tick_atom::value);
  using str = const std::string&;
  return {
      // from the data path: each call is admitted (its answer kept, its deadline set), then answered once
      [=](bind_atom, str key, const route_answer_ptr& a) { resolve_new(self, key, admit(self, a)); },
      [=](held_atom, str key, const holder_query& q, const route_answer_ptr& a) {
        resolve_held(self, key, q, admit(self, a));
      },
      [=](rebind_atom, str key, const route_answer_ptr& a) { rebind(self, key, admit(self, a)); },
      [=](clone_atom, str key, backend_index b, const route_answer_ptr& a) { bind_clone(self, key, b, admit(self, a)); },
      [=](op_find_atom, str op_id, str key, const route_answer_ptr& a) {
        find_op(self, op_id, key, admit(self, a), op_looks);
      },
      [=](op_atom, str key, std::string& op_id) { operation_started(self, key, op_id); },
      [=](op_done_atom, str key, std::string& op_id) { operation_released(self, key, op_id); },
      [=](release_atom, str key) { release(self, key); },
      [=](closing_atom) { self->state.accepting = false; },
      [=](leave_atom) { return leave(self); },
      [=](drain_atom, str name, bool on) { set_draining(self, name, on); },
      [=](backend_atom, str name) { replicate(self, backend_atom::value, name); },  // the cluster re-applies its entries
      [=](activity_atom, str name, str report) { publish_activity(self, name, report); },
      // from the backend and load-poller actors
      [=](owner_atom, str key) { return owns(self, key); },
      [=](health_atom, str name, bool healthy) {
        replicate_put(self, make_key(key_kind::health, name), core::health_value(healthy));
      },
      [=](load_atom, str name, double utilization) {
        replicate_put(self, make_key(key_kind::load, name), core::load_value(utilization));
      },
      // from session actors
      [=](ended_atom, str key) { session_ended(self, key); },
      [=](idle_atom, str key) { session_idle(self, key); },
      // from the cluster actor
      [=](members_atom, membership& view) { set_members(self, view); },
      [=](forget_atom, str key) { forget(self, key); },
      // from peers' routers
      [=](decide_atom, str key) { return decide_for_peer(self, key); },
      [=](decide_atom, str key, str name) { return adopt_for_peer(self, key, name); },
      [=](where_op_atom, str op_id) { return where_op(self, op_id); },
      [=](lookup_atom, str key) { return lookup(self, key); },
      // self-addressed
      [=](holder_atom, str key, std::int64_t found) { holder_found(self, key, found); },
      [=](confirm_atom, str key, str name) { confirm(self, key, name); },
      [=](op_find_atom, str op_id, str key, call_id call, std::uint32_t looks_left) {
        find_op(self, op_id, key, call, looks_left);
      },
      [=](deadline_atom) { check_deadlines(self); },
      [=](tick_atom) { tick(self); },
      [=](sweep_atom) { sweep_step(self); },
  };
}

}  // namespace
}  // namespace routing

router_actor spawn_router(caf::actor_system& sys, router_settings settings,
                          std::shared_ptr<session_table> table, backend_list backends) {
  return sys.spawn(routing::router_behavior, std::move(settings), std::move(table), std::move(backends));
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

void router::stop() const {
  caf::scoped_actor self{impl_->sys};
  self->send_exit(impl_->actor.handle, caf::exit_reason::user_shutdown);
  self->wait_for(impl_->actor.handle);
}

router::~router() {
  caf::anon_send_exit(impl_->actor.handle, caf::exit_reason::user_shutdown);
  for (auto& a : impl_->backend_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// Each callback is wrapped here, at the door, in its route_answer: from now
// on it is answered exactly once, even by a router that is gone.

void router::resolve(std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, bind_atom::value, std::move(key), make_answer(std::move(done)));
}

void router::resolve_held(std::string key, std::string session_id, std::string spark_user, std::string observed,
                          route_callback done) const {
  caf::anon_send(impl_->actor.handle, held_atom::value, std::move(key),
                 holder_query{std::move(session_id), std::move(spark_user), std::move(observed)},
                 make_answer(std::move(done)));
}

void router::rebind(std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, rebind_atom::value, std::move(key), make_answer(std::move(done)));
}

void router::bind_clone(std::string key, backend_index backend, route_callback done) const {
  caf::anon_send(impl_->actor.handle, clone_atom::value, std::move(key), backend, make_answer(std::move(done)));
}

void router::find_operation(std::string op_id, std::string key, route_callback done) const {
  caf::anon_send(impl_->actor.handle, op_find_atom::value, std::move(op_id), std::move(key),
                 make_answer(std::move(done)));
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

#include "actors/protocol.hpp"


#include <chrono>
#include <unordered_map>

#include "actors/placement.hpp"
#include "core/metrics.hpp"

namespace scg::actors {

struct router_state {
  router_settings settings;
  placement_policy policy;
  std::shared_ptr<session_table> table;
  backend_list backends;
  std::uint64_t cursor = 0;
  bool accepting = true;
  std::unordered_map<std::string, caf::actor> sessions;
  static inline const char* name = "router";
};

namespace {

constexpr auto op_sweep_interval = std::chrono::seconds(1);

/// Placement's view of the backends right now.
std::vector<candidate> candidates(const router_state& st) {
  auto bound = st.table->sessions_per_backend();
  std::vector<candidate> out;
  out.reserve(st.backends.size());
  for (std::size_t i = 0; i < st.backends.size(); ++i) {
    const auto& b = *st.backends[i];
    out.push_back({b.reachable.load() && !b.draining.load(), i < bound.size() ? bound[i] : 0,
                   std::nullopt});
  }
  return out;
}

/// Why no backend can take a new session, naming the first few.
std::string no_backend_message(const router_state& st) {
  constexpr std::size_t named = 5;
  std::string out = "scg: no backend can take a new session:";
  for (std::size_t i = 0; i < st.backends.size() && i < named; ++i) {
    const auto& b = *st.backends[i];
    out += (i ? ", " : " ") + b.name + " (" + b.address + ") " +
           (b.draining.load() ? "draining" : "unreachable");
  }
  if (st.backends.size() > named)
    out += " and " + std::to_string(st.backends.size() - named) + " more";
  return out;
}

/// Binds `key` to `backend` and starts its session actor.
backend_index bind(caf::stateful_actor<router_state>* self, const std::string& key,
                   backend_index backend) {
  auto& st = self->state;
  auto bound = st.table->bind_session(key, backend, now_ms());
  auto& slot = st.sessions[key];
  if (!slot)
    slot = spawn_session(self, key, st.table, st.settings.session_ttl_ms,
                         caf::actor_cast<caf::actor>(self));
  return bound;
}

/// Sends `msg` on to the session actor of `key`, if it lives.
template <class... Ts>
void to_session(caf::stateful_actor<router_state>* self, const std::string& key, Ts&&... xs) {
  auto it = self->state.sessions.find(key);
  if (it != self->state.sessions.end()) self->send(it->second, std::forward<Ts>(xs)...);
}

caf::behavior router_actor(caf::stateful_actor<router_state>* self, router_settings settings,
                           std::shared_ptr<session_table> table, backend_list backends) {
  auto& st = self->state;
  st.settings = settings;
  st.policy.kind = static_cast<placement_policy::strategy>(settings.placement_kind);
  st.policy.utilization_weight = settings.utilization_weight;
  st.policy.session_weight = settings.session_weight;
  st.policy.session_cap = settings.session_cap;
  st.table = std::move(table);
  st.backends = std::move(backends);
  self->set_exit_handler([=](const caf::exit_msg& msg) {
    for (auto& [key, session] : self->state.sessions) self->send_exit(session, msg.reason);
    self->quit(msg.reason);
  });
  self->delayed_send(self, op_sweep_interval, tick_atom::value);
  return {
      [=](bind_atom, const std::string& key, const route_callback& done) {
        auto& st = self->state;
        if (auto b = st.table->find_session(key, now_ms())) return done({*b, {}});
        if (!st.accepting) return done({std::nullopt, "replica is shutting down"});
        auto pick = place(st.policy, candidates(st), st.cursor);
        if (!pick) {
          core::bump(core::global_metrics().forward_no_backend_total);
          return done({std::nullopt, no_backend_message(st)});
        }
        core::bump(core::global_metrics().router_decisions_total);
        done({bind(self, key, static_cast<backend_index>(*pick)), {}});
      },
      [=](clone_atom, const std::string& key, backend_index backend) {
        if (self->state.table->find_session(key, now_ms())) return;
        core::bump(core::global_metrics().router_clones_bound_total);
        bind(self, key, backend);
      },
      [=](op_atom, const std::string& key, std::string& op_id) {
        to_session(self, key, op_atom::value, std::move(op_id));
      },
      [=](op_done_atom, const std::string& key, std::string& op_id) {
        to_session(self, key, op_done_atom::value, std::move(op_id));
      },
      [=](release_atom, const std::string& key) { to_session(self, key, release_atom::value); },
      [=](ended_atom, const std::string& key) {
        // A new binding for the same key may already have a new actor.
        auto it = self->state.sessions.find(key);
        if (it != self->state.sessions.end() && it->second.address() == self->current_sender())
          self->state.sessions.erase(it);
      },
      [=](drain_atom) { self->state.accepting = false; },
      [=](tick_atom) {
        auto& st = self->state;
        if (auto n = st.table->expire_ops(now_ms(), st.settings.op_ttl_ms); n > 0)
          core::bump(core::global_metrics().router_operations_expired_total, n);
        self->delayed_send(self, op_sweep_interval, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_router(caf::actor_system& sys, router_settings settings,
                        std::shared_ptr<session_table> table, backend_list backends) {
  return sys.spawn(router_actor, settings, std::move(table), std::move(backends));
}

// --- router: the data path's door -------------------------------------------

struct router::impl {
  caf::actor actor;
  std::vector<caf::actor> backend_actors;
};

router::router(caf::actor_system& sys, const config::gateway& cfg,
               std::shared_ptr<session_table> table, backend_list backends)
    : impl_(std::make_unique<impl>()) {
  router_settings s{};
  s.session_ttl_ms = std::int64_t{cfg.affinity.session_ttl_secs} * 1000;
  s.op_ttl_ms = std::int64_t{cfg.affinity.op_ttl_secs} * 1000;
  s.placement_kind = static_cast<int>(
      parse_strategy(cfg.placement.strategy).value_or(placement_policy::strategy::least_loaded));
  s.utilization_weight = cfg.placement.utilization_weight;
  s.session_weight = cfg.placement.session_weight;
  s.session_cap = static_cast<std::size_t>(cfg.placement.session_cap);
  for (const auto& b : backends) impl_->backend_actors.push_back(spawn_backend(sys, b));
  impl_->actor = spawn_router(sys, s, std::move(table), std::move(backends));
}

router::~router() {
  caf::anon_send_exit(impl_->actor, caf::exit_reason::user_shutdown);
  for (auto& a : impl_->backend_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

void router::resolve(std::string key, route_callback done) const {
  caf::anon_send(impl_->actor, bind_atom::value, std::move(key), std::move(done));
}

void router::bind_clone(std::string key, backend_index backend) const {
  caf::anon_send(impl_->actor, clone_atom::value, std::move(key), backend);
}

void router::operation_started(std::string key, std::string op_id) const {
  caf::anon_send(impl_->actor, op_atom::value, std::move(key), std::move(op_id));
}

void router::operation_released(std::string key, std::string op_id) const {
  caf::anon_send(impl_->actor, op_done_atom::value, std::move(key), std::move(op_id));
}

void router::session_released(std::string key) const {
  caf::anon_send(impl_->actor, release_atom::value, std::move(key));
}

void router::stop_new_sessions() const { caf::anon_send(impl_->actor, drain_atom::value); }

}  // namespace scg::actors

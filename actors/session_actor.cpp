#include "actors/protocol.hpp"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "actors/router_stats.hpp"
#include "core/metrics.hpp"

namespace scg::actors {

struct session_state {
  std::string key;
  std::shared_ptr<session_table> table;
  router_actor router;
  std::unordered_set<std::string> ops;  ///< operations this session started
  static inline const char* name = "session";
};

namespace {

using self_ptr = session_actor::stateful_pointer<session_state>;

constexpr std::size_t ops_prune_threshold = 256;

/// Removes the session's entries from the table and ends the actor.
void forget(self_ptr self) {
  auto& st = self->state;
  st.table->erase_session(st.key);
  for (const auto& op : st.ops) st.table->erase_op(op);
  self->send(st.router, ended_atom::value, st.key);
  self->quit();
}

/// Drops ids the table no longer has (expired or released elsewhere), so a
/// long-lived session that never releases its operations stays bounded.
void prune_ops(session_state& st) {
  for (auto it = st.ops.begin(); it != st.ops.end();)
    it = st.table->has_op(*it) ? std::next(it) : st.ops.erase(it);
}

session_actor::behavior_type session_behavior(self_ptr self, std::string key, std::shared_ptr<session_table> table,
                                              std::int64_t ttl_ms, router_actor router) {
  global_router_stats().session_actors.fetch_add(1, std::memory_order_relaxed);
  self->attach_functor([] { global_router_stats().session_actors.fetch_sub(1, std::memory_order_relaxed); });
  self->state.key = std::move(key);
  self->state.table = std::move(table);
  self->state.router = std::move(router);
  return {
      [=](op_atom, std::string& op_id) {
        auto& ops = self->state.ops;
        if (ops.size() >= ops_prune_threshold) prune_ops(self->state);
        ops.insert(std::move(op_id));
      },
      [=](op_done_atom, const std::string& op_id) {
        auto& st = self->state;
        st.ops.erase(op_id);
        if (st.ops.empty()) {  // idle: the binding stays, the actor goes
          self->send(st.router, idle_atom::value, st.key);
          self->quit();
        }
      },
      [=](release_atom) { forget(self); },
      [=](expire_atom) {
        // The router's sweep saw this session idle; check again, it may have
        // been used since.
        auto& st = self->state;
        auto last = st.table->session_last_seen(st.key);
        auto idle = last ? now_ms() - *last : ttl_ms;
        if (idle < ttl_ms) return;
        spdlog::get("router")->debug("session_expired idle_ms={}", idle);
        core::bump(global_router_stats().router_sessions_expired_total);
        forget(self);
      },
  };
}

}  // namespace

session_actor spawn_session(caf::local_actor* parent, std::string key, std::shared_ptr<session_table> table,
                            std::int64_t ttl_ms, router_actor router) {
  return parent->spawn(session_behavior, std::move(key), std::move(table), ttl_ms, std::move(router));
}

}  // namespace scg::actors

// Operation ids the data path's table missed (a reattach through another
// replica than the one the operation started at): the replicated table,
// then every live peer, looked at again while the cluster settles.
#include <memory>
#include <string>

#include "actors/router_state.hpp"
#include "actors/router_stats.hpp"
#include "core/metrics.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors::routing {

using core::key_kind;
using core::make_key;

namespace {

/// The first peer protocol that answers where_op (cluster/protocol_version.hpp).
constexpr std::uint32_t where_op_protocol = 2;

/// How long a replica that finds nobody knowing an operation id, while the
/// cluster settles and under a session it does not know either, looks again
/// before it refuses: the operation's delta and its session's (batched for
/// a few ms, 5 to 10 ms on their way) may be just behind the client, who
/// reattaches through another replica the moment a stream ends.
constexpr auto op_grace = std::chrono::milliseconds(200);  // op_looks looks, op_grace / op_looks apart

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
void nobody_found(self_ptr self, const std::string& op_id, const std::string& key, call_id call,
                  bool a_peer_failed, std::uint32_t looks_left) {
  auto r = nobody_knows(self->state, op_id, key, a_peer_failed);
  if (r.error.empty() || looks_left == 0 || a_peer_failed) return answer(self, call, std::move(r));
  self->delayed_send(self, op_grace / op_looks, op_find_atom::value, op_id, key, call, looks_left - 1);
}

/// An operation id the data path's table missed, asked of every live peer
/// at once: the replica that saw the operation start holds it from before
/// its client could learn the id, whoever owns the key, while the entry's
/// delta may still be on its way. The first name wins; the call hears it,
/// or, when nobody knows the id (within ask_timeout), nobody_found's answer.
void ask_peers_for_op(self_ptr self, const std::string& op_id, const std::string& key, call_id call,
                      std::uint32_t looks_left) {
  struct search {
    call_id call;
    std::string op_id, key;
    std::uint32_t looks_left = 0;
    std::size_t waiting = 0;
    bool answered = false;
    bool a_peer_failed = false;
  };
  auto s = std::make_shared<search>(search{call, op_id, key, looks_left});
  auto on_answer = [self, s](const std::string& name, bool failed) {
    if (s->answered) return;
    --s->waiting;
    s->a_peer_failed = s->a_peer_failed || failed;
    if (auto b = name.empty() ? std::nullopt : find_backend(self->state.backends, name)) {
      s->answered = true;
      core::bump(global_router_stats().router_operations_found_total);
      return answer(self, s->call, {*b, {}});
    }
    if (s->waiting == 0) {
      s->answered = true;
      nobody_found(self, s->op_id, s->key, s->call, s->a_peer_failed, s->looks_left);
    }
  };
  for (const auto& m : self->state.peers)
    if (m.protocol >= where_op_protocol) ++s->waiting;
  if (s->waiting == 0) return nobody_found(self, op_id, key, call, false, looks_left);
  for (const auto& m : self->state.peers) {
    if (m.protocol < where_op_protocol) continue;
    self->request(router_of(m), ask_timeout, where_op_atom::value, op_id)
        .then([=](const std::string& name) { on_answer(name, false); },
              [=](const caf::error&) { on_answer({}, true); });
  }
}

}  // namespace

/// Resolves an operation id the data path's table missed before anything is
/// placed: the replicated table, then the peers (ask_peers_for_op). No
/// backend and no error: nobody knows it, the call routes by its session
/// `key`; a refusal: nobody knows it, nor the session, while the cluster
/// settles (nobody_knows), after `looks_left` more looks.
void find_op(self_ptr self, const std::string& op_id, const std::string& key, call_id call,
             std::uint32_t looks_left) {
  auto& st = self->state;
  if (auto op = st.table->find_op(op_id, now_ms())) return answer(self, call, {op->backend, {}});
  if (!st.cluster) return answer(self, call, {});
  const auto name = replicated(st, make_key(key_kind::operation, op_id));
  if (auto b = name.empty() ? std::nullopt : find_backend(st.backends, name)) {
    core::bump(global_router_stats().router_operations_found_total);
    return answer(self, call, {*b, {}});
  }
  ask_peers_for_op(self, op_id, key, call, looks_left);
}

/// A peer's data path missed this operation id: our table's answer.
std::string where_op(self_ptr self, const std::string& op_id) {
  auto& st = self->state;
  auto op = st.table->find_op(op_id, now_ms());
  return op ? st.backends[op->backend]->name : std::string();
}

}  // namespace scg::actors::routing

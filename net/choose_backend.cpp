// The backend decision of one call (net/choose_backend.hpp): which lookup
// answers, and what the router is asked when none does.
#include "net/choose_backend.hpp"

namespace scg::net {

namespace {

constexpr std::uint64_t interrupt_operation_id = 3;  // InterruptRequest.INTERRUPT_TYPE_OPERATION_ID

route_decision decide(route_action a, actors::backend_index b = 0) { return {a, b, core::local_reason::no_backend}; }

}  // namespace

bool follows_operation(rpc kind, const request_fields& f) {
  if (f.operation_id.empty()) return false;
  return kind == rpc::reattach_execute || kind == rpc::release_execute ||
         (kind == rpc::interrupt && f.interrupt_type == interrupt_operation_id);
}

route_decision choose_backend(rpc kind, const request_fields& f, std::size_t backend_count,
                              config::lost_action on_lost, route_lookup& table, bool op_asked) {
  const bool replay = on_lost == config::lost_action::replay;
  if (follows_operation(kind, f)) {
    // An operation on a lost backend died with it: route by session, and
    // the new server answers OPERATION_NOT_FOUND, so the client re-runs it.
    // With replay, scg says so itself, naming the lost backend.
    auto op = table.operation();
    if (op && !op->lost) return decide(replay && op->down ? route_action::wait : route_action::use, op->backend);
    if (op && replay) return {route_action::refuse, op->backend, core::local_reason::operation_lost};
    // Not known here: another replica may have started it a moment ago. Its
    // session (often a new session id) must not be placed before that is known.
    if (!op && !op_asked) return decide(route_action::resolve_op);
  }
  if (backend_count == 0) return {route_action::refuse, 0, core::local_reason::no_backend};
  // Nothing to keep affinity for (no message, or an rpc without a session):
  // spread over reachable backends; the backend answers.
  if (f.session_id.empty()) return decide(route_action::any);
  if (auto s = table.session()) {
    if (!s->lost) return decide(replay && s->down ? route_action::wait : route_action::use, s->backend);
    // Down for on_backend_lost.after_secs: move the session (the new server
    // tells 4.0+ clients SESSION_CHANGED, as Spark does), move and replay
    // it, or refuse.
    switch (on_lost) {
      case config::lost_action::rebind: return decide(route_action::rebind, s->backend);
      case config::lost_action::replay: return decide(route_action::replay, s->backend);
      case config::lost_action::fail: break;
    }
    return {route_action::refuse, s->backend, core::local_reason::backend_lost};
  }
  // A client that has seen its server-side session had one somewhere, and
  // the RPCs that never create a session only make sense where it lives
  // (PySpark sends ReleaseExecute without the observed id): a server may
  // still hold it (scg forgot the binding, or restarted).
  const bool needs_existing =
      kind == rpc::reattach_execute || kind == rpc::release_execute || kind == rpc::release_session;
  if (!f.observed_server_session.empty() || needs_existing) return decide(route_action::resolve_held);
  return decide(route_action::resolve);
}

}  // namespace scg::net

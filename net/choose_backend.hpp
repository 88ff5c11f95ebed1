#pragma once
// Which backend a routed call goes to, decided from plain facts: the rpc and
// its routing fields, what the operation index and the session table hold,
// whether a bound backend is lost. Pure (no actors, sockets or gRPC); the
// forwarder acts on the answer, tests/unit/choose_backend_test.cpp covers it.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "actors/session_table.hpp"
#include "config/config.hpp"
#include "core/local_reply.hpp"
#include "net/wire.hpp"

namespace scg::net {

/// A binding the routing table holds.
struct binding {
  actors::backend_index backend = 0;
  bool lost = false;  ///< its backend has been down for on_backend_lost.after_secs
  bool down = false;  ///< its backend is down now (unreachable or unhealthy), maybe not yet lost
};

/// What choose_backend asks of the routing table, and only as far as its
/// decision needs (a lookup refreshes the entry it finds): the forwarder's
/// reads actors::session_table, a test's answers fixed values.
class route_lookup {
 public:
  /// The request's operation_id in the operation index.
  virtual std::optional<binding> operation() = 0;
  /// The request's session key in the session table.
  virtual std::optional<binding> session() = 0;

 protected:
  ~route_lookup() = default;
};

enum class route_action : std::uint8_t {
  use,           ///< forward to `backend` (the operation's or the session's)
  any,           ///< nothing to keep affinity for: any eligible backend
  resolve,       ///< a brand-new session: the router places it (router::resolve)
  resolve_held,  ///< a server may still hold the session: the router looks first (router::resolve_held)
  resolve_op,    ///< the operation id is not in the index here: the router asks the cluster
                 ///< (router::find_operation), then the call is routed again with `op_asked`
  rebind,        ///< the session's `backend` is lost: the router moves it (router::rebind)
  replay,        ///< as rebind, then the session's journal is replayed on its new backend
  wait,          ///< replay: the session's (or operation's) `backend` is down, not yet lost:
                 ///< the call waits and is routed again, rather than answered UNAVAILABLE
  refuse,        ///< scg answers `refusal`: no_backend (none configured), backend_lost
                 ///< (`backend`, with on_backend_lost.action: fail), or operation_lost
                 ///< (replay: the operation died with its `backend`)
};

struct route_decision {
  route_action action = route_action::refuse;
  actors::backend_index backend = 0;
  core::local_reason refusal = core::local_reason::no_backend;
};

/// True for the RPCs routed by operation id before session id: Reattach,
/// ReleaseExecute and an Interrupt of one operation, when they name one.
bool follows_operation(rpc kind, const request_fields& f);

/// The backend for a call of `kind` with routing fields `f`, with
/// `backend_count` backends configured. In order: the operation index (for
/// follows_operation, unless its backend is lost: the operation died with
/// it; an id it misses is resolved in the cluster first, unless `op_asked`
/// says that was done and found nothing), `any` without a session id, the
/// session table (a lost backend's session is handled by `on_lost`), then
/// the router.
route_decision choose_backend(rpc kind, const request_fields& f, std::size_t backend_count,
                              config::lost_action on_lost, route_lookup& table, bool op_asked = false);

}  // namespace scg::net

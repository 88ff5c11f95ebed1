#pragma once
// Admission of one call: its tenant's rate limits and executions bulkhead
// (limits.max_executions), and the execution slot an admitted call holds
// until its operation ends (net/executions.hpp keeps the ledger).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/local_reply.hpp"
#include "net/forwarder.hpp"
#include "net/wire.hpp"

namespace scg::net {

/// Why scg answers a call itself instead of forwarding it (finish_local's arguments).
struct refusal {
  core::local_reason reason;
  std::string message;
  std::chrono::milliseconds retry_after{};  ///< for a "retry later" reason; zero: the default
};

/// Executions: the streams a tenant's bulkhead counts and times.
inline bool is_execution(rpc r) { return r == rpc::execute_plan || r == rpc::reattach_execute; }

/// ExecutePlanRequest.request_options asks for a reattachable execution. A
/// server ends a non-reattachable execution's one stream without result_complete.
bool asks_reattachable(std::string_view body);

/// What scg tells a client whose execution `op` (empty: id unknown) it ended
/// at its tenant's limits.max_execution_secs.
std::string killed_message(const forward_context& fx, const std::string& tenant, const std::string& op);

/// One call's part in its tenant's executions: the slot it took, the
/// operation it belongs to, that operation's start. Lives in its call, on its worker.
class execution_claim {
 public:
  /// Rate limits, then the executions bulkhead: nullopt when the call of
  /// `kind` may go on, else why not (audited). A query allowed to run keeps
  /// its slot across every reattach. ReattachExecute and ReleaseExecute
  /// start no work and are never rate limited. An ExecutePlan whose command
  /// waits (`f.plan`) is rate limited but takes no slot. `reattachable` reads the
  /// ExecutePlan's request options; it is asked only when a limit applies.
  std::optional<refusal> admit(forward_context& fx, rpc kind, const request_fields& f, const std::string& tenant,
                               const std::string& request_id, const std::function<bool()>& reattachable);

  /// The operation's start (steady ms): max_execution_secs counts from here.
  std::int64_t started_ms() const { return started_ms_; }
  /// The execution waits rather than computes (net/wire.hpp plan_kind, or a
  /// reattach of such an operation): no slot, and max_execution_secs does not apply.
  bool waits() const { return waiting_; }
  /// True while the call is a stream of a known operation.
  bool has_operation() const { return !op_.empty(); }
  bool result_complete() const { return result_complete_; }
  /// Whether the response just read was the operation's last (result_complete).
  void set_result_complete(bool complete) { result_complete_ = complete; }

  /// The ExecutePlan's operation id `op` is known: its slot and start move to it.
  void adopt(forward_context& fx, rpc kind, const std::string& op, const std::string& tenant);
  /// scg ended the operation at max_execution_secs.
  void kill(forward_context& fx);
  /// The call ends with `final_code`: a slot still its own goes back; its
  /// operation ends with it when its result was complete or it failed, else
  /// (a cut stream, a client gone) waits for a reattach.
  void settle(forward_context& fx, const std::string& tenant, int final_code);

 private:
  std::string op_;               // the operation this execution stream belongs to
  std::int64_t started_ms_ = 0;  // its start (steady ms)
  bool holds_slot_ = false;      // a slot taken for this call, not yet its operation's
  bool killed_ = false, result_complete_ = false;
  bool reattachable_ = true;  // a non-reattachable execution ends with its stream
  bool waiting_ = false;      // waits rather than computes: exempt from both limits
};

}  // namespace scg::net

// Rate limits and the executions bulkhead for one call (net/admission.hpp):
// what admits it, and what its execution slot becomes when it ends.
#include "net/admission.hpp"

#include <algorithm>
#include <cmath>

#include "auth/rate_limit.hpp"
#include "core/audit.hpp"
#include "core/clock.hpp"
#include "core/protowire.hpp"

namespace scg::net {

namespace {

/// Forgets operations detached longer than Spark keeps them (at most once a second).
void sweep_executions(forward_context& fx) {
  const auto now = core::now_ms();
  auto last = fx.executions_swept_ms.load(std::memory_order_relaxed);
  if (now - last < 1000 || !fx.executions_swept_ms.compare_exchange_strong(last, now)) return;
  fx.executions.expire(now, fx.detached_ttl_ms);
}

}  // namespace

bool asks_reattachable(std::string_view body) {
  // ExecutePlanRequest.request_options (5) holds a RequestOption whose
  // reattach_options (1) say reattachable (1 = true).
  namespace pw = core::protowire;
  pw::field f, g, h;
  while (!body.empty() && pw::next(body, f)) {
    if (f.number != 5 || f.type != 2) continue;
    for (auto option = f.payload; !option.empty() && pw::next(option, g);) {
      if (g.number != 1 || g.type != 2) continue;
      for (auto reattach = g.payload; !reattach.empty() && pw::next(reattach, h);)
        if (h.number == 1 && h.type == 0) return h.varint != 0;
    }
  }
  return false;
}

std::string killed_message(const forward_context& fx, const std::string& tenant, const std::string& op) {
  const auto secs = fx.limits.for_tenant(tenant).max_execution_secs;
  return "scg: the execution ran longer than tenant " + tenant +
         " may (limits.max_execution_secs = " + std::to_string(secs) + ", counted from its start across "
         "reattaches); operation " + (op.empty() ? std::string("(id unknown)") : op) + " was interrupted";
}

// PySpark 4.1+ answers a refused ExecutePlan with a Reattach before it sends
// the ExecutePlan again, and a limit that took its token for that Reattach
// would refuse the ExecutePlan forever (measured: tests/realspark `retries`).
std::optional<refusal> execution_claim::admit(forward_context& fx, rpc kind, const request_fields& f,
                                              const std::string& tenant, const std::string& request_id,
                                              const std::function<bool()>& reattachable) {
  const bool starts_no_work =
      (kind == rpc::reattach_execute || kind == rpc::release_execute) && !f.operation_id.empty();
  // The continuation of an operation scg has routed: a call that was admitted.
  const bool continuation = starts_no_work && fx.table->has_op(f.operation_id);
  if (fx.limiter && fx.limiter->enabled() && !starts_no_work) {
    auto a = fx.limiter->try_acquire(tenant, f.user_id);
    if (!a.allowed) {
      core::audit("rate_limited", {{"tenant", tenant}, {"user", f.user_id}, {"session", f.session_id},
                                   {"rpc", rpc_name(kind)}, {"request_id", request_id}});
      return refusal{core::local_reason::rate_limited,
                     "scg: rate limit of tenant " + tenant + " reached (rate_limits); retry after " +
                         std::to_string(a.retry_after.count()) + " ms",
                     a.retry_after};
    }
  }
  if (!is_execution(kind)) return std::nullopt;
  sweep_executions(fx);
  const auto& limits = fx.limits.for_tenant(tenant);
  const auto cap = limits.max_executions;
  // Each replica holds its share of the cluster-wide cap, at least one.
  const int mine = cap > 0 ? std::max(1, static_cast<int>(std::ceil(cap * fx.share.load()))) : 0;
  if (kind == rpc::reattach_execute && !f.operation_id.empty()) {
    const auto now = core::now_ms();
    auto a = fx.executions.attach(f.operation_id);
    if (!a && continuation) {
      // First seen here (a failover, a restart): its clock runs from its start, when a replica said.
      const auto op = fx.table->find_op(f.operation_id, now);
      const auto started = op && op->started_wall_ms > 0 ? std::min(now, core::steady_of(op->started_wall_ms)) : now;
      a = fx.executions.attach_unknown(f.operation_id, tenant, mine, started);
    }
    if (a) {
      if (a->killed) return refusal{core::local_reason::reattach_of_killed, killed_message(fx, tenant, f.operation_id)};
      op_ = f.operation_id;
      started_ms_ = a->started;
      waiting_ = a->waiting;
      return std::nullopt;
    }
  }
  // A command that waits (a listener bus, an awaitTermination) holds no
  // executors: it takes no slot and has no time limit (net/wire.hpp plan_kind).
  if (kind == rpc::execute_plan && net::waits(f.plan)) {
    waiting_ = true;
    started_ms_ = core::now_ms();
    if (cap > 0 || limits.max_execution_secs > 0) reattachable_ = reattachable();
    return std::nullopt;
  }
  if (!fx.executions.try_take(tenant, mine)) {
    core::audit("execution.refused", {{"tenant", tenant}, {"user", f.user_id}, {"session", f.session_id},
                                      {"request_id", request_id}});
    return refusal{core::local_reason::executions_full,
                   "scg: tenant " + tenant + " runs " + std::to_string(mine) +
                       " executions through this replica, its share of limits.max_executions (" +
                       std::to_string(cap) + "); retry later",
                   std::chrono::seconds(1)};
  }
  holds_slot_ = true;
  started_ms_ = core::now_ms();
  // Only a reattachable execution outlives its stream (spark-connect-go asks for none).
  if (kind == rpc::execute_plan && (cap > 0 || limits.max_execution_secs > 0)) reattachable_ = reattachable();
  return std::nullopt;
}

void execution_claim::adopt(forward_context& fx, rpc kind, const std::string& op, const std::string& tenant) {
  if (kind != rpc::execute_plan || !op_.empty()) return;
  if (waiting_) {
    op_ = op;
    fx.executions.adopt_waiting(op, tenant, started_ms_);
    return;
  }
  if (!holds_slot_) return;
  holds_slot_ = false;
  op_ = op;
  fx.executions.adopt(op, tenant, started_ms_);
}

void execution_claim::kill(forward_context& fx) {
  if (op_.empty()) return;
  fx.executions.kill(op_, core::now_ms());
  killed_ = true;
}

void execution_claim::settle(forward_context& fx, const std::string& tenant, int final_code) {
  if (holds_slot_) fx.executions.give_back(tenant);
  if (op_.empty() || killed_) return;  // kill() settled it
  namespace code = core::grpc_code;
  const bool goes_on = reattachable_ && !result_complete_ &&
                       (final_code == code::ok || final_code == code::cancelled || final_code == code::unavailable ||
                        final_code == code::deadline_exceeded);
  if (goes_on)
    fx.executions.detach(op_, core::now_ms());
  else
    fx.executions.finish(op_);
}

}  // namespace scg::net

#include "net/executions.hpp"

namespace scg::net {

bool execution_ledger::take_locked(const std::string& tenant, int cap) {
  auto& n = slots_[tenant];
  if (cap > 0 && n >= cap) {
    if (n == 0) slots_.erase(tenant);
    return false;
  }
  ++n;
  return true;
}

void execution_ledger::give_back_locked(const std::string& tenant) {
  auto it = slots_.find(tenant);
  if (it != slots_.end() && --it->second <= 0) slots_.erase(it);
}

void execution_ledger::attach_stream(operation& o) {
  if (o.killed) return;
  ++o.streams;
  o.detached_since = 0;
}

bool execution_ledger::try_take(const std::string& tenant, int cap) {
  std::lock_guard lock{mu_};
  return take_locked(tenant, cap);
}

void execution_ledger::give_back(const std::string& tenant) {
  std::lock_guard lock{mu_};
  give_back_locked(tenant);
}

void execution_ledger::release_slot(operation& o) {
  if (!o.holds_slot) return;
  o.holds_slot = false;
  give_back_locked(o.tenant);
}

std::pair<execution_ledger::operation&, bool> execution_ledger::open_locked(const std::string& op,
                                                                          const std::string& tenant, ms started) {
  auto [it, fresh] = ops_.try_emplace(op);
  if (fresh) {
    it->second.tenant = tenant;
    it->second.started = started;
  }
  return {it->second, fresh};
}

void execution_ledger::adopt(const std::string& op, const std::string& tenant, ms started) {
  std::lock_guard lock{mu_};
  auto [o, fresh] = open_locked(op, tenant, started);
  if (fresh) {
    o.holds_slot = true;
  } else {
    give_back_locked(tenant);  // the caller's slot: the operation has one
  }
  attach_stream(o);
}

void execution_ledger::adopt_waiting(const std::string& op, const std::string& tenant, ms started) {
  std::lock_guard lock{mu_};
  auto [o, fresh] = open_locked(op, tenant, started);
  if (fresh) o.waiting = true;
  attach_stream(o);
}

std::optional<execution_ledger::attached> execution_ledger::attach(const std::string& op) {
  std::lock_guard lock{mu_};
  auto it = ops_.find(op);
  if (it == ops_.end()) return std::nullopt;
  auto& o = it->second;
  attach_stream(o);
  return attached{o.started, o.killed, o.waiting};
}

execution_ledger::attached execution_ledger::attach_unknown(const std::string& op, const std::string& tenant,
                                                            int cap, ms started) {
  std::lock_guard lock{mu_};
  auto [o, fresh] = open_locked(op, tenant, started);
  if (fresh) o.holds_slot = take_locked(tenant, cap);
  attach_stream(o);
  return attached{o.started, o.killed, o.waiting};
}

void execution_ledger::detach(const std::string& op, ms now) {
  std::lock_guard lock{mu_};
  auto it = ops_.find(op);
  if (it == ops_.end() || it->second.killed) return;
  auto& o = it->second;
  if (o.streams > 0) --o.streams;
  if (o.streams == 0) o.detached_since = now;
}

void execution_ledger::finish(const std::string& op) {
  std::lock_guard lock{mu_};
  auto it = ops_.find(op);
  if (it == ops_.end()) return;
  release_slot(it->second);
  ops_.erase(it);
}

void execution_ledger::kill(const std::string& op, ms now) {
  std::lock_guard lock{mu_};
  auto it = ops_.find(op);
  if (it == ops_.end()) return;
  auto& o = it->second;
  release_slot(o);
  o.killed = true;
  o.streams = 0;
  o.detached_since = now;
}

std::size_t execution_ledger::expire(ms now, ms ttl) {
  std::lock_guard lock{mu_};
  std::size_t n = 0;
  for (auto it = ops_.begin(); it != ops_.end();) {
    auto& o = it->second;
    if (o.streams == 0 && o.detached_since > 0 && now - o.detached_since >= ttl) {
      release_slot(o);
      it = ops_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::vector<std::string> execution_ledger::live_ops(ms quiet_since) const {
  std::lock_guard lock{mu_};
  std::vector<std::string> out;
  for (const auto& [id, o] : ops_)
    if (!o.killed && (o.streams > 0 || o.detached_since >= quiet_since)) out.push_back(id);
  return out;
}

int execution_ledger::in_use(const std::string& tenant) const {
  std::lock_guard lock{mu_};
  auto it = slots_.find(tenant);
  return it == slots_.end() ? 0 : it->second;
}

std::size_t execution_ledger::size() const {
  std::lock_guard lock{mu_};
  return ops_.size();
}

}  // namespace scg::net

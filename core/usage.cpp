#include "core/usage.hpp"

#include <algorithm>
#include <tuple>

namespace scg::core {

usage_figures& usage_figures::operator+=(const usage_figures& o) {
  sessions += o.sessions;
  executions += o.executions;
  execution_ms += o.execution_ms;
  result_bytes += o.result_bytes;
  result_rows += o.result_rows;
  rpcs += o.rpcs;
  rejections += o.rejections;
  replays += o.replays;
  replay_ms += o.replay_ms;
  return *this;
}

bool usage_figures::operator==(const usage_figures& o) const {
  return std::tie(sessions, executions, execution_ms, result_bytes, result_rows, rpcs, rejections, replays, replay_ms) ==
         std::tie(o.sessions, o.executions, o.execution_ms, o.result_bytes, o.result_rows, o.rpcs, o.rejections,
                  o.replays, o.replay_ms);
}

namespace {

constexpr std::int64_t minute_ms = 60000;

std::int64_t minute_of(std::int64_t ms) { return ms >= 0 ? ms / minute_ms : 0; }

bool any(const usage_figures& f) { return !(f == usage_figures{}); }

/// Largest first by RPCs, then by name.
void rank(std::vector<usage_ledger::row>& rows) {
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (a.figures.rpcs != b.figures.rpcs) return a.figures.rpcs > b.figures.rpcs;
    return std::tie(a.tenant, a.user) < std::tie(b.tenant, b.user);
  });
}

}  // namespace

void usage_ledger::entry::add(const usage_figures& f, std::int64_t minute) {
  totals += f;
  auto& b = ring[static_cast<std::size_t>(minute % usage_window_minutes)];
  if (b.minute != minute) b = bucket{minute, {}};
  b.figures += f;
}

usage_ledger::usage_ledger(usage_options o) : options_(o) {}

void usage_ledger::configure(const usage_options& o) {
  std::lock_guard lock{names_mu_};
  options_ = o;
}

usage_ledger::shard& usage_ledger::my_shard() {
  // Each thread keeps to one shard: workers (one per core) do not share.
  thread_local const std::size_t mine = next_shard_.fetch_add(1, std::memory_order_relaxed);
  return shards_[mine % shard_count];
}

namespace {

/// Whether `name` is (or now becomes) one of `kept`, which holds at most
/// `bound` names; a refusal counts in `overflows`. The caller holds the lock.
bool admit_bounded(std::set<std::string, std::less<>>& kept, std::string_view name, std::size_t bound,
                   std::atomic<std::uint64_t>& overflows) {
  if (kept.count(name)) return true;
  if (kept.size() < bound) {
    kept.emplace(name);
    return true;
  }
  overflows.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace

std::string_view usage_ledger::admit_tenant(std::string_view tenant) {
  // "_none" and "_other" are always kept: they are the bound, not tenants.
  if (tenant == none || tenant == other) return tenant;
  std::lock_guard lock{names_mu_};
  return admit_bounded(kept_tenants_, tenant, options_.max_tenants, tenant_overflows_) ? tenant : other;
}

bool usage_ledger::admit_user(const std::string& key) {
  std::lock_guard lock{names_mu_};
  return admit_bounded(kept_users_, key, options_.max_users, user_overflows_);
}

usage_ledger::tenant_entry& usage_ledger::tenant_in(shard& sh, std::string_view tenant) {
  if (tenant.empty()) tenant = none;
  auto it = sh.tenants.find(tenant);
  if (it != sh.tenants.end()) return *it->second;
  const auto kept = admit_tenant(tenant);
  if (kept != tenant) return tenant_in(sh, kept);
  return *sh.tenants.emplace(std::string(tenant), std::make_unique<tenant_entry>()).first->second;
}

usage_ledger::entry& usage_ledger::user_in(shard& sh, std::string_view tenant, std::string_view user) {
  sh.key.assign(tenant).push_back('\0');
  sh.key.append(user);
  auto it = sh.users.find(sh.key);
  if (it != sh.users.end()) return *it->second;
  // One "_other" user per tenant: bounded by the tenants kept.
  if (user != other && !admit_user(sh.key)) return user_in(sh, tenant, other);
  return *sh.users.emplace(sh.key, std::make_unique<entry>()).first->second;
}

void usage_ledger::add_in(shard& sh, std::string_view tenant, std::string_view user, const usage_figures& f,
                          std::int64_t now_ms, const call_usage* call) {
  const auto minute = minute_of(now_ms);
  auto& t = tenant_in(sh, tenant);
  t.add(f, minute);
  if (call) {
    ++t.rpcs[rpc_index(call->method)];
    if (call->rejection) ++t.rejections[static_cast<std::size_t>(*call->rejection)];
  }
  if (user.empty() || tenant.empty()) return;
  // A tenant counted under "_other" keeps its users under "_other" too.
  const auto kept = sh.tenants.count(tenant) ? tenant : other;
  user_in(sh, kept, user).add(f, minute);
}

void usage_ledger::record_call(std::string_view tenant, std::string_view user, const call_usage& u,
                               std::int64_t now_ms) {
  usage_figures f;
  f.executions = u.execution ? 1 : 0;
  f.execution_ms = u.execution_ms;
  f.result_bytes = u.result_bytes;
  f.result_rows = u.result_rows;
  f.rpcs = 1;
  f.rejections = u.rejection ? 1 : 0;
  auto& sh = my_shard();
  std::lock_guard lock{sh.mu};
  add_in(sh, tenant, user, f, now_ms, &u);
}

void usage_ledger::record_session(std::string_view tenant, std::string_view user, std::int64_t now_ms) {
  usage_figures f;
  f.sessions = 1;
  auto& sh = my_shard();
  std::lock_guard lock{sh.mu};
  add_in(sh, tenant, user, f, now_ms, nullptr);
}

void usage_ledger::record_replay(std::string_view tenant, std::string_view user, std::uint64_t took_ms,
                                 std::int64_t now_ms) {
  usage_figures f;
  f.replays = 1;
  f.replay_ms = took_ms;
  auto& sh = my_shard();
  std::lock_guard lock{sh.mu};
  add_in(sh, tenant, user, f, now_ms, nullptr);
}

std::vector<usage_ledger::tenant_totals> usage_ledger::totals() const {
  std::map<std::string, tenant_totals, std::less<>> merged;
  for (auto& sh : shards_) {
    std::lock_guard lock{sh.mu};
    for (const auto& [name, t] : sh.tenants) {
      auto& m = merged[name];
      m.tenant = name;
      m.figures += t->totals;
      for (std::size_t i = 0; i < m.rpcs.size(); ++i) m.rpcs[i] += t->rpcs[i];
      for (std::size_t i = 0; i < m.rejections.size(); ++i) m.rejections[i] += t->rejections[i];
    }
  }
  std::vector<tenant_totals> out;
  out.reserve(merged.size());
  for (auto& [name, t] : merged) out.push_back(std::move(t));
  return out;
}

std::vector<usage_ledger::row> usage_ledger::window(bool by_user, std::int64_t minutes, std::int64_t now_ms,
                                                    std::size_t limit, std::size_t* total_rows,
                                                    std::string_view tenant_filter) const {
  minutes = std::clamp<std::int64_t>(minutes, 1, usage_window_minutes);
  const auto last = minute_of(now_ms);
  auto sum = [&](const entry& e, usage_figures& f) {
    for (const auto& b : e.ring)
      if (b.minute > last - minutes && b.minute <= last) f += b.figures;
  };
  std::map<std::string, row, std::less<>> merged;  // by tenant, or by tenant '\0' user
  for (auto& sh : shards_) {
    std::lock_guard lock{sh.mu};
    if (by_user) {
      for (const auto& [key, e] : sh.users) {
        const auto cut = key.find('\0');
        if (!tenant_filter.empty() && std::string_view(key).substr(0, cut) != tenant_filter) continue;
        auto& r = merged[key];
        if (r.tenant.empty()) r.tenant = key.substr(0, cut), r.user = key.substr(cut + 1);
        sum(*e, r.figures);
      }
    } else {
      for (const auto& [name, t] : sh.tenants) {
        if (!tenant_filter.empty() && name != tenant_filter) continue;
        auto& r = merged[name];
        r.tenant = name;
        sum(*t, r.figures);
      }
    }
  }
  std::vector<row> rows;
  for (auto& [key, r] : merged)
    if (any(r.figures)) rows.push_back(std::move(r));
  if (total_rows) *total_rows = rows.size();
  rank(rows);
  if (rows.size() > limit) rows.resize(limit);
  return rows;
}

std::vector<usage_ledger::row> usage_ledger::top_users(std::size_t n) const {
  std::vector<row> rows;
  if (n == 0) return rows;
  std::map<std::string, row, std::less<>> merged;
  for (auto& sh : shards_) {
    std::lock_guard lock{sh.mu};
    for (const auto& [key, e] : sh.users) {
      const auto cut = key.find('\0');
      auto& r = merged[key];
      if (r.tenant.empty()) r.tenant = key.substr(0, cut), r.user = key.substr(cut + 1);
      r.figures += e->totals;
    }
  }
  for (auto& [key, r] : merged) rows.push_back(std::move(r));
  rank(rows);
  if (rows.size() > n) rows.resize(n);
  return rows;
}

std::uint64_t usage_ledger::tenant_overflows() const { return tenant_overflows_.load(std::memory_order_relaxed); }

std::uint64_t usage_ledger::user_overflows() const { return user_overflows_.load(std::memory_order_relaxed); }

usage_ledger& global_usage() {
  static usage_ledger ledger;
  return ledger;
}

void named_counters::add(std::string_view name, std::uint64_t n) {
  std::lock_guard lock{mu_};
  auto it = counts_.find(name);
  if (it == counts_.end()) it = counts_.emplace(std::string(name), 0).first;
  it->second += n;
}

std::map<std::string, std::uint64_t, std::less<>> named_counters::snapshot() const {
  std::lock_guard lock{mu_};
  return counts_;
}

named_counters& global_pool_sheds() {
  static named_counters c;
  return c;
}

}  // namespace scg::core

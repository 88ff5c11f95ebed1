#include "actors/session_table.hpp"

#include <algorithm>

#include <chrono>
#include <functional>

namespace scg::actors {

namespace {

/// Calls `f(key, value)` for every entry of a shard's map, whichever kind.
template <class V, class F>
void visit(const std::unordered_map<std::string, V>& map, F&& f) {
  for (const auto& [key, value] : map) f(std::string_view(key), value);
}
template <class V, class F>
void visit(const core::packed_map<V>& map, F&& f) {
  map.for_each([&](const auto& item) { f(item.key(), item.value); });
}

/// The `limit` entries of `shards` with the smallest keys above `after` that
/// `keep(key, value)` accepts, as rows made by `row(key, value)`, sorted by
/// key. A bounded max-heap keeps the memory to `limit` rows whatever the
/// table's size; each shard is scanned under its own shared lock.
template <class Row, class Shards, class Keep, class MakeRow>
std::vector<Row> smallest_after(const Shards& shards, const std::string& after, std::size_t limit,
                                const Keep& keep, const MakeRow& row) {
  std::vector<Row> heap;
  if (limit == 0) return heap;
  auto by_key = [](const Row& a, const Row& b) { return a.key < b.key; };
  for (const auto& s : shards) {
    std::shared_lock lock{s.mutex};
    visit(s.map, [&](std::string_view key, const auto& value) {
      if (!after.empty() && key <= after) return;
      if (heap.size() == limit && !(key < heap.front().key)) return;
      if (!keep(key, value)) return;
      if (heap.size() == limit) {
        std::pop_heap(heap.begin(), heap.end(), by_key);
        heap.pop_back();
      }
      heap.push_back(row(key, value));
      std::push_heap(heap.begin(), heap.end(), by_key);
    });
  }
  std::sort_heap(heap.begin(), heap.end(), by_key);
  return heap;
}

}  // namespace

session_table::session_table(std::size_t backend_count) : per_backend_(backend_count) {}

std::size_t session_table::shard_of(std::string_view key) {
  return std::hash<std::string_view>{}(key) % shard_count;
}

std::optional<backend_index> session_table::find_session(const std::string& key, clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto* it = s.map.find(key);
  if (!it) return std::nullopt;
  it->value.last_seen.store(now, std::memory_order_relaxed);
  return it->value.backend;
}

void session_table::count_new_session(const std::string& key) {
  sessions_.fetch_add(1, std::memory_order_relaxed);
  count_tenant(key, +1);
}

backend_index session_table::bind_session(const std::string& key, backend_index backend,
                                          clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(key, 0, backend, now);
  if (inserted) {
    count_new_session(key);
    if (backend < per_backend_.size()) per_backend_[backend].fetch_add(1, std::memory_order_relaxed);
  } else {
    it->value.last_seen.store(now, std::memory_order_relaxed);
  }
  return it->value.backend;
}

void session_table::set_session(const std::string& key, backend_index backend, clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(key, 0, backend, now);
  if (!inserted) {
    if (it->value.backend != backend) move_session(it->value, backend);
    return;
  }
  count_new_session(key);
  if (backend < per_backend_.size()) per_backend_[backend].fetch_add(1, std::memory_order_relaxed);
}

void session_table::move_session(session_entry& entry, backend_index backend) {
  if (entry.backend < per_backend_.size()) per_backend_[entry.backend].fetch_sub(1, std::memory_order_relaxed);
  entry.backend = backend;
  if (backend < per_backend_.size()) per_backend_[backend].fetch_add(1, std::memory_order_relaxed);
}

std::optional<backend_index> session_table::session_backend(std::string_view key) const {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto* it = s.map.find(key);
  if (!it) return std::nullopt;
  return it->value.backend;
}

bool session_table::rebind_if_bound(const std::string& key, backend_index backend) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto* found = s.map.find(key);
  if (!found || found->value.backend == backend) return false;
  move_session(found->value, backend);
  return true;
}

std::optional<clock_ms> session_table::session_last_seen(std::string_view key) const {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto* it = s.map.find(key);
  if (!it) return std::nullopt;
  return it->value.last_seen.load(std::memory_order_relaxed);
}

bool session_table::erase_session(const std::string& key) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto* it = s.map.find(key);
  if (!it) return false;
  auto backend = it->value.backend;
  s.map.erase(key);
  sessions_.fetch_sub(1, std::memory_order_relaxed);
  count_tenant(key, -1);
  if (backend < per_backend_.size()) per_backend_[backend].fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void session_table::count_tenant(const std::string& key, int delta) {
  auto k = session_key::parse(key);
  if (!k) return;
  std::lock_guard lock{tenant_mutex_};
  auto& n = per_tenant_[k->tenant];
  n += delta;
  if (n <= 0) per_tenant_.erase(k->tenant);
}

std::size_t session_table::sessions_of_tenant(const std::string& tenant) const {
  std::lock_guard lock{tenant_mutex_};
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : static_cast<std::size_t>(it->second);
}

std::unordered_map<std::string, std::size_t> session_table::sessions_by_tenant() const {
  std::lock_guard lock{tenant_mutex_};
  std::unordered_map<std::string, std::size_t> out;
  for (const auto& [tenant, n] : per_tenant_)
    if (n > 0) out.emplace(tenant, static_cast<std::size_t>(n));
  return out;
}

std::optional<session_table::op_entry> session_table::find_op(const std::string& op_id,
                                                               clock_ms now) {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(op_id);
  if (it == s.map.end()) return std::nullopt;
  it->second.last_seen.store(now, std::memory_order_relaxed);
  return it->second.op;
}

backend_index session_table::add_op(const std::string& op_id, backend_index backend,
                                    const std::string& session, clock_ms now, std::int64_t started_wall_ms) {
  auto& s = op_shards_[shard_of(op_id)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(op_id, op_entry{backend, session, started_wall_ms}, now);
  if (inserted) {
    ops_.fetch_add(1, std::memory_order_relaxed);
    ++s.per_session[session];
  } else {
    it->second.last_seen.store(now, std::memory_order_relaxed);
    if (it->second.op.started_wall_ms == 0) it->second.op.started_wall_ms = started_wall_ms;
  }
  return it->second.op.backend;
}

std::optional<clock_ms> session_table::op_last_seen(std::string_view op_id) const {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(std::string(op_id));
  if (it == s.map.end()) return std::nullopt;
  return it->second.last_seen.load(std::memory_order_relaxed);
}

std::optional<backend_index> session_table::op_backend(const std::string& op_id) const {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(op_id);
  if (it == s.map.end()) return std::nullopt;
  return it->second.op.backend;
}

bool session_table::has_op(const std::string& op_id) const {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  return s.map.count(op_id) != 0;
}

void session_table::forget_op(op_shard& s, std::unordered_map<std::string, op_slot>::iterator it) {
  auto n = s.per_session.find(it->second.op.session);
  if (n != s.per_session.end() && --n->second == 0) s.per_session.erase(n);
  s.map.erase(it);
}

bool session_table::erase_op(const std::string& op_id) {
  auto& s = op_shards_[shard_of(op_id)];
  std::unique_lock lock{s.mutex};
  auto it = s.map.find(op_id);
  if (it == s.map.end()) return false;
  forget_op(s, it);
  ops_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

std::size_t session_table::expire_ops(clock_ms now, clock_ms ttl_ms, bool keep_learned) {
  std::size_t removed = 0;
  for (auto& s : op_shards_) {
    std::unique_lock lock{s.mutex};
    for (auto it = s.map.begin(); it != s.map.end();) {
      const auto seen = it->second.last_seen.load(std::memory_order_relaxed);
      if (!(keep_learned && seen == 0) && now - seen >= ttl_ms) {
        forget_op(s, it++);
        ++removed;
      } else {
        ++it;
      }
    }
  }
  ops_.fetch_sub(removed, std::memory_order_relaxed);
  return removed;
}

std::vector<std::size_t> session_table::sessions_per_backend(std::size_t count) const {
  count = std::min(count, per_backend_.size());
  std::vector<std::size_t> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back(per_backend_[i].load(std::memory_order_relaxed));
  return out;
}

std::pair<std::size_t, clock_ms> session_table::recent_sessions(backend_index backend, clock_ms since) const {
  std::size_t n = 0;
  clock_ms newest = 0;
  for (const auto& s : session_shards_) {
    std::shared_lock lock{s.mutex};
    s.map.for_each([&](const auto& it) {
      if (it.value.backend != backend) return;
      const auto seen = it.value.last_seen.load(std::memory_order_relaxed);
      if (seen <= 0) return;  // learned from a peer, never used here: the peer reports it
      newest = std::max(newest, seen);
      if (seen >= since) ++n;
    });
  }
  return {n, newest};
}

std::size_t session_table::sessions_on(backend_index backend) const {
  return backend < per_backend_.size() ? per_backend_[backend].load(std::memory_order_relaxed) : 0;
}

std::optional<session_table::session_row> session_table::session_row_of(std::string_view key) const {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto* it = s.map.find(key);
  if (!it) return std::nullopt;
  return session_row{std::string(key), it->value.backend, it->value.last_seen.load(std::memory_order_relaxed)};
}

std::vector<session_table::session_row> session_table::list_sessions(
    const std::string& after, std::size_t limit,
    const std::function<bool(std::string_view key, backend_index)>& keep) const {
  return smallest_after<session_row>(
      session_shards_, after, limit,
      [&](std::string_view key, const session_entry& e) { return keep(key, e.backend); },
      [](std::string_view key, const session_entry& e) {
        return session_row{std::string(key), e.backend, e.last_seen.load(std::memory_order_relaxed)};
      });
}

std::vector<session_table::op_row> session_table::list_ops(
    const std::string& after, std::size_t limit,
    const std::function<bool(std::string_view op_id, const op_entry&)>& keep) const {
  return smallest_after<op_row>(
      op_shards_, after, limit,
      [&](std::string_view key, const op_slot& o) { return keep(key, o.op); },
      [](std::string_view key, const op_slot& o) {
        return op_row{std::string(key), o.op, o.last_seen.load(std::memory_order_relaxed)};
      });
}

void session_table::count_ops(std::unordered_map<std::string, std::size_t>& counts) const {
  if (counts.empty()) return;
  for (const auto& s : op_shards_) {
    std::shared_lock lock{s.mutex};
    if (s.per_session.empty()) continue;
    for (auto& [session, n] : counts)
      if (auto it = s.per_session.find(session); it != s.per_session.end()) n += it->second;
  }
}

}  // namespace scg::actors

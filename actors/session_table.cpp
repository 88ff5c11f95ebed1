#include "actors/session_table.hpp"

#include <algorithm>

#include <chrono>
#include <functional>

namespace scg::actors {

std::string session_key::str() const {
  std::string out;
  out.reserve(tenant.size() + user_id.size() + session_id.size() + 12);
  for (const std::string* part : {&tenant, &user_id, &session_id}) {
    out += std::to_string(part->size());
    out += ':';
    out += *part;
  }
  return out;
}

clock_ms now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

session_table::session_table(std::size_t backend_count) : per_backend_(backend_count) {}

std::size_t session_table::shard_of(std::string_view key) {
  return std::hash<std::string_view>{}(key) % shard_count;
}

std::optional<backend_index> session_table::find_session(const std::string& key, clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(key);
  if (it == s.map.end()) return std::nullopt;
  it->second.last_seen.store(now, std::memory_order_relaxed);
  return it->second.backend;
}

backend_index session_table::bind_session(const std::string& key, backend_index backend,
                                          clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(key, backend, now);
  if (inserted) {
    sessions_.fetch_add(1, std::memory_order_relaxed);
    if (backend < per_backend_.size()) per_backend_[backend].fetch_add(1, std::memory_order_relaxed);
  } else {
    it->second.last_seen.store(now, std::memory_order_relaxed);
  }
  return it->second.backend;
}

void session_table::set_session(const std::string& key, backend_index backend, clock_ms now) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(key, backend, now);
  if (inserted) {
    sessions_.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (it->second.backend == backend) return;
    if (it->second.backend < per_backend_.size())
      per_backend_[it->second.backend].fetch_sub(1, std::memory_order_relaxed);
    it->second.backend = backend;
  }
  if (backend < per_backend_.size()) per_backend_[backend].fetch_add(1, std::memory_order_relaxed);
}

std::optional<clock_ms> session_table::session_last_seen(const std::string& key) const {
  auto& s = session_shards_[shard_of(key)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(key);
  if (it == s.map.end()) return std::nullopt;
  return it->second.last_seen.load(std::memory_order_relaxed);
}

bool session_table::erase_session(const std::string& key) {
  auto& s = session_shards_[shard_of(key)];
  std::unique_lock lock{s.mutex};
  auto it = s.map.find(key);
  if (it == s.map.end()) return false;
  auto backend = it->second.backend;
  s.map.erase(it);
  sessions_.fetch_sub(1, std::memory_order_relaxed);
  if (backend < per_backend_.size()) per_backend_[backend].fetch_sub(1, std::memory_order_relaxed);
  return true;
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
                                    const std::string& session, clock_ms now) {
  auto& s = op_shards_[shard_of(op_id)];
  std::unique_lock lock{s.mutex};
  auto [it, inserted] = s.map.try_emplace(op_id, op_entry{backend, session}, now);
  if (inserted)
    ops_.fetch_add(1, std::memory_order_relaxed);
  else
    it->second.last_seen.store(now, std::memory_order_relaxed);
  return it->second.op.backend;
}

std::optional<clock_ms> session_table::op_last_seen(const std::string& op_id) const {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  auto it = s.map.find(op_id);
  if (it == s.map.end()) return std::nullopt;
  return it->second.last_seen.load(std::memory_order_relaxed);
}

bool session_table::has_op(const std::string& op_id) const {
  auto& s = op_shards_[shard_of(op_id)];
  std::shared_lock lock{s.mutex};
  return s.map.count(op_id) != 0;
}

bool session_table::erase_op(const std::string& op_id) {
  auto& s = op_shards_[shard_of(op_id)];
  std::unique_lock lock{s.mutex};
  if (s.map.erase(op_id) == 0) return false;
  ops_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

std::size_t session_table::expire_ops(clock_ms now, clock_ms ttl_ms) {
  std::size_t removed = 0;
  for (auto& s : op_shards_) {
    std::unique_lock lock{s.mutex};
    for (auto it = s.map.begin(); it != s.map.end();) {
      if (now - it->second.last_seen.load(std::memory_order_relaxed) >= ttl_ms) {
        it = s.map.erase(it);
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

std::size_t session_table::sessions_on(backend_index backend) const {
  return backend < per_backend_.size() ? per_backend_[backend].load(std::memory_order_relaxed) : 0;
}

}  // namespace scg::actors

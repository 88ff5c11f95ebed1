#include "cluster/replicated_table.hpp"

#include <limits>
#include <utility>

#include "cluster/rendezvous.hpp"

namespace scg::cluster {

std::size_t replicated_table::bucket_of(std::string_view key) {
  return static_cast<std::size_t>(stable_hash(key) % digest_buckets);
}

std::uint64_t replicated_table::entry_hash(const entry& e) {
  return stable_hasher{}
      .add(e.key)
      .add(e.ver.time.wall_ms)
      .add(std::uint64_t{e.ver.time.logical})
      .add(e.ver.node)
      .add(std::uint64_t{e.deleted ? 1u : 0u})
      .finish();
}

void replicated_table::account(std::size_t bucket, const entry& e, bool adding) {
  // XOR is its own inverse: the same call with adding=false undoes an add.
  hashes_[bucket] ^= entry_hash(e);
  if (adding) {
    ++size_;
    if (!e.deleted) ++live_;
  } else {
    --size_;
    if (!e.deleted) --live_;
  }
}

const entry& replicated_table::upsert(entry incoming, merge_result& result) {
  const std::size_t bucket = bucket_of(incoming.key);
  auto& shard = shards_[bucket];
  auto it = shard.find(incoming.key);
  if (it == shard.end()) {
    account(bucket, incoming, true);
    std::string key = incoming.key;
    result.applied = true;
    return shard.emplace(std::move(key), std::move(incoming)).first->second;
  }
  entry& current = it->second;
  const bool rival_backends =
      !current.deleted && !incoming.deleted && current.backend != incoming.backend;
  if (!(current.ver < incoming.ver)) {
    // An equal version is a repeat delivery of the same write: no conflict.
    result.conflict = rival_backends && incoming.ver < current.ver;
    return current;
  }
  result.applied = true;
  result.conflict = rival_backends;
  account(bucket, current, false);
  account(bucket, incoming, true);
  result.previous = std::move(current);
  current = std::move(incoming);
  return current;
}

merge_result replicated_table::merge(const entry& incoming) {
  merge_result result;
  upsert(incoming, result);
  return result;
}

const entry& replicated_table::put(const std::string& key, std::string backend,
                                   std::string session, version ver) {
  merge_result ignored;
  return upsert(entry{key, std::move(backend), std::move(session), std::move(ver), false, 0},
                ignored);
}

const entry& replicated_table::erase(const std::string& key, version ver,
                                     std::uint64_t tombstone_ttl_ms, std::uint64_t now_wall_ms) {
  // Saturate, so a huge ttl means "keep for ever" rather than wrapping.
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t expires =
      tombstone_ttl_ms > max - now_wall_ms ? max : now_wall_ms + tombstone_ttl_ms;
  merge_result ignored;
  return upsert(entry{key, {}, {}, std::move(ver), true, expires}, ignored);
}

const entry* replicated_table::find(const std::string& key) const {
  const auto& shard = shards_[bucket_of(key)];
  auto it = shard.find(key);
  return it == shard.end() ? nullptr : &it->second;
}

std::vector<entry> replicated_table::bucket_entries(std::size_t b) const {
  std::vector<entry> out;
  if (b >= digest_buckets) return out;
  out.reserve(shards_[b].size());
  for (const auto& [key, e] : shards_[b]) out.push_back(e);
  return out;
}

std::size_t replicated_table::expire_tombstones(std::uint64_t now_wall_ms) {
  if (size_ == live_) return 0;
  std::size_t removed = 0;
  for (std::size_t b = 0; b < digest_buckets; ++b) {
    auto& shard = shards_[b];
    for (auto it = shard.begin(); it != shard.end();) {
      if (it->second.deleted && it->second.tombstone_expires_ms <= now_wall_ms) {
        account(b, it->second, false);
        it = shard.erase(it);
        ++removed;
      } else {
        ++it;
      }
    }
  }
  return removed;
}

std::vector<entry> replicated_table::all() const {
  std::vector<entry> out;
  out.reserve(size_);
  for (const auto& shard : shards_)
    for (const auto& [key, e] : shard) out.push_back(e);
  return out;
}

std::vector<std::size_t> differing_buckets(const bucket_digest& a, const bucket_digest& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < digest_buckets; ++i)
    if (a[i] != b[i]) out.push_back(i);
  return out;
}

}  // namespace scg::cluster

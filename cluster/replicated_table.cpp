#include "cluster/replicated_table.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <utility>

#include "core/rendezvous.hpp"

namespace scg::cluster {

std::size_t replicated_table::bucket_of(std::string_view key) { return fine_bucket_of(key) / sub_buckets; }

namespace {

/// The sub-bucket of a key whose stable hash is `h`.
std::size_t fine_of(std::uint64_t h) {
  return static_cast<std::size_t>(h % digest_buckets * sub_buckets + h / digest_buckets % sub_buckets);
}

/// An entry's hash, from a hasher that has been fed its key alone (the
/// sub-bucket's hash feeds the same first bytes, so a merge hashes the key once).
std::uint64_t entry_hash_after_key(core::stable_hasher h, const entry& e) {
  return h.add(e.ver.time.wall_ms)
      .add(std::uint64_t{e.ver.time.logical})
      .add(e.ver.node)
      .add(std::uint64_t{e.deleted ? 1u : 0u})
      .finish();
}

}  // namespace

std::size_t replicated_table::fine_bucket_of(std::string_view key) { return fine_of(core::stable_hash(key)); }

bucket_digest replicated_table::digest() const {
  bucket_digest d{};
  for (std::size_t f = 0; f < fine_buckets; ++f) d[f / sub_buckets] ^= fine_hashes_[f];
  return d;
}

std::uint64_t replicated_table::entry_hash(const entry& e) {
  return entry_hash_after_key(core::stable_hasher{}.add(e.key), e);
}

void replicated_table::account(std::size_t fine, const entry& e, bool adding) {
  account(fine, entry_hash(e), e.deleted, adding);
}

void replicated_table::account(std::size_t fine, std::uint64_t hash, bool deleted, bool adding) {
  // XOR is its own inverse: the same call with adding=false undoes an add.
  fine_hashes_[fine] ^= hash;
  if (adding) {
    ++size_;
    if (!deleted) ++live_;
  } else {
    --size_;
    if (!deleted) --live_;
  }
}

entry entry_view::to_entry() const {
  return entry{std::string(key), std::string(backend), std::string(session), {time, std::string(node)}, deleted,
               tombstone_expires_ms, started_ms};
}

std::uint32_t replicated_table::name_id(std::string_view name) {
  auto [it, added] = name_ids_.try_emplace(std::string(name), static_cast<std::uint32_t>(names_.size()));
  if (added) names_.emplace_back(name);
  return it->second;
}

// An item's tail: the session's bytes, the backend's, and 8 bytes of a
// tombstone's expiry or an operation's start when there is one. With the
// 32-byte head, a session binding fits 96 bytes.
std::size_t replicated_table::tail_size(const entry& e) {
  const bool stamped = e.deleted || e.started_ms != 0;
  return e.session.size() + e.backend.size() + (stamped ? sizeof(std::uint64_t) : 0);
}

replicated_table::head replicated_table::head_of(const entry& e) {
  return {e.ver.time.wall_ms, e.ver.time.logical, name_id(e.ver.node), static_cast<std::uint32_t>(e.session.size()),
          e.deleted, e.deleted || e.started_ms != 0};
}

void replicated_table::write_tail(shard::item& it, const entry& e) {
  const std::uint64_t stamp = e.deleted ? e.tombstone_expires_ms : e.started_ms;
  const std::size_t stamp_size = it.value.stamped ? sizeof stamp : 0;
  char* tail = it.tail_data();
  std::memcpy(tail, e.session.data(), e.session.size());
  std::memcpy(tail + e.session.size(), e.backend.data(), e.backend.size());
  std::memcpy(tail + e.session.size() + e.backend.size(), &stamp, stamp_size);
}

void replicated_table::replace(shard& s, shard::item*& it, const entry& e, const head& h, std::size_t size) {
  if (it->tail().size() == size) {
    it->value = h;  // a new version of the same shape (a refresh, most often): rewritten in place
  } else {
    s.erase(e.key);
    it = s.try_emplace(e.key, size, h).first;
  }
  write_tail(*it, e);
}

entry_view replicated_table::view(const shard::item& it) const {
  const head& h = it.value;
  const auto tail = it.tail();
  const std::size_t stamp_size = h.stamped ? sizeof(std::uint64_t) : 0;
  std::uint64_t stamp = 0;
  if (h.stamped) std::memcpy(&stamp, tail.data() + tail.size() - stamp_size, stamp_size);
  return {it.key(),
          tail.substr(h.session_size, tail.size() - h.session_size - stamp_size),
          tail.substr(0, h.session_size),
          names_[h.node],
          {h.wall_ms, h.logical},
          h.deleted,
          h.deleted ? stamp : 0,
          h.deleted ? 0 : stamp};
}

entry replicated_table::upsert(const entry& incoming, merge_result& result) {
  std::unique_lock lock(mutex_);
  // One pass over the key's bytes serves its sub-bucket and its entry's
  // hash, and one probe finds its slot or fills it: a full sync merges a
  // million new keys.
  core::stable_hasher key_hasher;
  key_hasher.add(incoming.key);
  const std::size_t fine = fine_of(key_hasher.finish());
  auto& s = shards_[fine / sub_buckets];
  const head h = head_of(incoming);
  const std::size_t size = tail_size(incoming);
  auto [found, added] = s.try_emplace(incoming.key, size, h);
  if (added) {
    write_tail(*found, incoming);
    account(fine, entry_hash_after_key(key_hasher, incoming), incoming.deleted, true);
    result.applied = true;
    return incoming;
  }
  entry current = view(*found).to_entry();
  const bool rival_backends = !current.deleted && !incoming.deleted && current.backend != incoming.backend;
  if (!(current.ver < incoming.ver)) {
    // An equal version is a repeat delivery of the same write: no conflict.
    result.conflict = rival_backends && incoming.ver < current.ver;
    return current;
  }
  result.applied = true;
  result.conflict = rival_backends;
  account(fine, entry_hash_after_key(key_hasher, current), current.deleted, false);
  account(fine, entry_hash_after_key(key_hasher, incoming), incoming.deleted, true);
  replace(s, found, incoming, h, size);
  result.previous = std::move(current);
  return incoming;
}

merge_result replicated_table::merge(const entry& incoming) {
  merge_result result;
  upsert(incoming, result);
  return result;
}

entry replicated_table::put(const std::string& key, std::string backend, std::string session, version ver,
                            std::uint64_t started_ms) {
  merge_result ignored;
  return upsert(entry{key, std::move(backend), std::move(session), std::move(ver), false, 0, started_ms}, ignored);
}

entry replicated_table::erase(const std::string& key, version ver, std::uint64_t tombstone_ttl_ms,
                              std::uint64_t now_wall_ms) {
  // Saturate, so a huge ttl means "keep for ever" rather than wrapping.
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t expires = tombstone_ttl_ms > max - now_wall_ms ? max : now_wall_ms + tombstone_ttl_ms;
  merge_result ignored;
  return upsert(entry{key, {}, {}, std::move(ver), true, expires}, ignored);
}

std::optional<entry> replicated_table::find(std::string_view key) const {
  const auto* it = shards_[bucket_of(key)].find(key);
  if (!it) return std::nullopt;
  return view(*it).to_entry();
}

std::string replicated_table::live_backend(std::string_view key) const {
  std::shared_lock lock(mutex_);
  const auto* it = shards_[bucket_of(key)].find(key);
  if (!it) return {};
  const auto e = view(*it);
  return e.deleted ? std::string() : std::string(e.backend);
}

bool replicated_table::released(std::string_view key) const {
  std::shared_lock lock(mutex_);
  const auto* it = shards_[bucket_of(key)].find(key);
  return it && view(*it).deleted;
}

std::vector<entry> replicated_table::bucket_entries(std::size_t b, std::uint64_t subs) const {
  std::vector<entry> out;
  if (subs == ~std::uint64_t{0}) out.reserve(bucket_size(b));
  for_each_in(b, subs, [&](const entry_view& e) { out.push_back(e.to_entry()); });
  return out;
}

std::size_t replicated_table::expire_tombstones(std::uint64_t now_wall_ms) {
  if (size_ == live_) return 0;
  std::unique_lock lock(mutex_);
  std::size_t removed = 0;
  for (std::size_t b = 0; b < digest_buckets; ++b)
    removed += shards_[b].erase_if([&](const shard::item& it) {
      const auto e = view(it);
      if (!e.deleted || e.tombstone_expires_ms > now_wall_ms) return false;
      account(fine_bucket_of(e.key), e.to_entry(), false);
      return true;
    });
  return removed;
}

bool replicated_table::expire_tombstone(std::string_view key, std::uint64_t now_wall_ms) {
  std::unique_lock lock(mutex_);
  const auto fine = fine_bucket_of(key);
  auto& s = shards_[fine / sub_buckets];
  const auto* it = s.find(key);
  if (!it) return false;
  const auto e = view(*it);
  if (!e.deleted || e.tombstone_expires_ms > now_wall_ms) return false;
  account(fine, e.to_entry(), false);
  s.erase(key);
  return true;
}

std::vector<entry> replicated_table::all() const {
  std::vector<entry> out;
  out.reserve(size_);
  for_each([&](const entry_view& e) { out.push_back(e.to_entry()); });
  return out;
}

fate binding_fate(std::int64_t written, std::int64_t used, std::int64_t wall, std::int64_t ttl) {
  if (used > written + ttl / 4) return fate::touch;
  if (wall - std::max(written + ttl / 4, used) > ttl) return fate::expire;
  return fate::keep;
}

bool kept_whatever_use(std::int64_t written, std::int64_t wall, std::int64_t ttl) {
  return wall <= written + ttl / 4;  // a use is no later than `wall`: binding_fate keeps it
}

std::vector<std::size_t> differing_buckets(const bucket_digest& a, const bucket_digest& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < digest_buckets; ++i)
    if (a[i] != b[i]) out.push_back(i);
  return out;
}

std::vector<bucket_part> differing_parts(const fine_digest& a, const fine_digest& b) {
  std::vector<bucket_part> out;
  for (std::size_t bucket = 0; bucket < digest_buckets; ++bucket) {
    std::uint64_t subs = 0;
    for (std::size_t sub = 0; sub < sub_buckets; ++sub) {
      const auto f = bucket * sub_buckets + sub;
      if (a[f] != b[f]) subs |= std::uint64_t{1} << sub;
    }
    if (subs != 0) out.push_back({bucket, subs});
  }
  return out;
}

}  // namespace scg::cluster

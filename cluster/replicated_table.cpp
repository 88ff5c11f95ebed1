#include "cluster/replicated_table.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
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

/// An entry in one allocation: these 32 bytes, then the bytes of the key, the
/// session and the backend (or other value: load and health readings vary),
/// and for a tombstone its expiry. A session binding fits jemalloc's 96-byte class.
struct replicated_table::record {
  std::uint64_t wall_ms;
  std::uint32_t logical;
  std::uint32_t node;  // in names_: the few replicas there are
  std::uint32_t key_size;
  std::uint32_t session_size;
  std::uint32_t backend_size;
  bool deleted;

  const char* bytes() const { return reinterpret_cast<const char*>(this + 1); }
  std::string_view key() const { return {bytes(), key_size}; }
  std::string_view session() const { return {bytes() + key_size, session_size}; }
  std::string_view backend() const { return {bytes() + key_size + session_size, backend_size}; }
  std::uint64_t tombstone_expires_ms() const {
    std::uint64_t v = 0;
    if (deleted) std::memcpy(&v, bytes() + key_size + session_size + backend_size, sizeof v);
    return v;
  }
};
static_assert(sizeof(replicated_table::record) == 32);

void replicated_table::record_free::operator()(record* r) const noexcept { ::operator delete(r); }

entry entry_view::to_entry() const {
  return entry{std::string(key), std::string(backend), std::string(session), {time, std::string(node)}, deleted,
               tombstone_expires_ms};
}

replicated_table::replicated_table() = default;
replicated_table::~replicated_table() = default;
replicated_table::replicated_table(replicated_table&&) noexcept = default;
replicated_table& replicated_table::operator=(replicated_table&&) noexcept = default;

std::uint32_t replicated_table::name_id(std::string_view name) {
  auto [it, added] = name_ids_.try_emplace(std::string(name), static_cast<std::uint32_t>(names_.size()));
  if (added) names_.emplace_back(name);
  return it->second;
}

replicated_table::record_ptr replicated_table::pack(const entry& e) {
  const std::size_t expiry = e.deleted ? sizeof e.tombstone_expires_ms : 0;
  void* block = ::operator new(sizeof(record) + e.key.size() + e.session.size() + e.backend.size() + expiry);
  record_ptr r(new (block) record{e.ver.time.wall_ms, e.ver.time.logical, name_id(e.ver.node),
                                  static_cast<std::uint32_t>(e.key.size()),
                                  static_cast<std::uint32_t>(e.session.size()),
                                  static_cast<std::uint32_t>(e.backend.size()), e.deleted});
  char* bytes = reinterpret_cast<char*>(r.get() + 1);
  for (const std::string* part : {&e.key, &e.session, &e.backend}) {
    std::memcpy(bytes, part->data(), part->size());
    bytes += part->size();
  }
  std::memcpy(bytes, &e.tombstone_expires_ms, expiry);
  return r;
}

entry_view replicated_table::view(const record& r) const {
  return {r.key(), r.backend(), r.session(), names_[r.node], {r.wall_ms, r.logical}, r.deleted,
          r.tombstone_expires_ms()};
}

std::size_t replicated_table::probe(const shard& s, std::string_view key) {
  const std::size_t mask = s.slots.size() - 1;
  for (std::size_t i = std::hash<std::string_view>{}(key) & mask;; i = (i + 1) & mask)
    if (!s.slots[i] || s.slots[i]->key() == key) return i;  // a slot is always free: load <= 3/4
}

void replicated_table::grow(shard& s) {
  std::vector<record_ptr> old = std::move(s.slots);
  s.slots = std::vector<record_ptr>(old.empty() ? 8 : old.size() * 2);
  for (auto& r : old)
    if (r) {
      const auto i = probe(s, r->key());
      s.slots[i] = std::move(r);
    }
}

void replicated_table::remove_at(shard& s, std::size_t hole) {
  // Backward-shift deletion: later entries of the probe run move up into the
  // hole unless their home slot lies (cyclically) after it.
  const std::size_t mask = s.slots.size() - 1;
  s.slots[hole].reset();
  --s.used;
  for (std::size_t j = (hole + 1) & mask; s.slots[j]; j = (j + 1) & mask) {
    const std::size_t home = std::hash<std::string_view>{}(s.slots[j]->key()) & mask;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      s.slots[hole] = std::move(s.slots[j]);
      hole = j;
    }
  }
}

entry replicated_table::upsert(const entry& incoming, merge_result& result) {
  const std::size_t bucket = bucket_of(incoming.key);
  auto& s = shards_[bucket];
  if ((s.used + 1) * 4 > s.slots.size() * 3) grow(s);
  const auto i = probe(s, incoming.key);
  if (!s.slots[i]) {
    account(bucket, incoming, true);
    s.slots[i] = pack(incoming);
    ++s.used;
    result.applied = true;
    return incoming;
  }
  entry current = view(*s.slots[i]).to_entry();
  const bool rival_backends = !current.deleted && !incoming.deleted && current.backend != incoming.backend;
  if (!(current.ver < incoming.ver)) {
    // An equal version is a repeat delivery of the same write: no conflict.
    result.conflict = rival_backends && incoming.ver < current.ver;
    return current;
  }
  result.applied = true;
  result.conflict = rival_backends;
  account(bucket, current, false);
  account(bucket, incoming, true);
  s.slots[i] = pack(incoming);
  result.previous = std::move(current);
  return incoming;
}

merge_result replicated_table::merge(const entry& incoming) {
  merge_result result;
  upsert(incoming, result);
  return result;
}

entry replicated_table::put(const std::string& key, std::string backend, std::string session, version ver) {
  merge_result ignored;
  return upsert(entry{key, std::move(backend), std::move(session), std::move(ver), false, 0}, ignored);
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
  const auto& s = shards_[bucket_of(key)];
  if (s.slots.empty()) return std::nullopt;
  const auto& r = s.slots[probe(s, key)];
  if (!r) return std::nullopt;
  return view(*r).to_entry();
}

std::vector<entry> replicated_table::bucket_entries(std::size_t b) const {
  std::vector<entry> out;
  if (b >= digest_buckets) return out;
  out.reserve(shards_[b].used);
  for (const auto& r : shards_[b].slots)
    if (r) out.push_back(view(*r).to_entry());
  return out;
}

std::size_t replicated_table::expire_tombstones(std::uint64_t now_wall_ms) {
  if (size_ == live_) return 0;
  std::size_t removed = 0;
  for (std::size_t b = 0; b < digest_buckets; ++b) {
    auto& s = shards_[b];
    std::vector<std::string> gone;  // collected first: removal moves entries about
    for (const auto& r : s.slots)
      if (r && r->deleted && r->tombstone_expires_ms() <= now_wall_ms) gone.emplace_back(r->key());
    for (const auto& key : gone) {
      const auto i = probe(s, key);
      account(b, view(*s.slots[i]).to_entry(), false);
      remove_at(s, i);
      ++removed;
    }
  }
  return removed;
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

std::vector<std::size_t> differing_buckets(const bucket_digest& a, const bucket_digest& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < digest_buckets; ++i)
    if (a[i] != b[i]) out.push_back(i);
  return out;
}

}  // namespace scg::cluster

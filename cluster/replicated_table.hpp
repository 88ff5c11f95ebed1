#pragma once
// The replicated table every replica holds: sessions ("s/…") and operation ids
// ("o/…") bound to backend names. Writes carry a version (hybrid logical time +
// node) and the newest version wins, so merges are idempotent and commutative
// and replicas converge whatever the order, loss or repetition of deliveries.
// A hash per digest bucket, updated on every change, lets two replicas find
// the few keys they disagree on without shipping the table: 64 buckets in
// protocol 1 and 2, each split in 64 sub-buckets in the fine digest peers of
// protocol 3 exchange, so a repair resends about a 4096th of the table per
// key that differs instead of a 64th.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cluster/hlc.hpp"
#include "core/packed_map.hpp"

namespace scg::cluster {

inline constexpr std::size_t digest_buckets = 64;
inline constexpr std::size_t sub_buckets = 64;  ///< per digest bucket, in the fine digest
inline constexpr std::size_t fine_buckets = digest_buckets * sub_buckets;

/// One hash per bucket: XOR of the hashes of the bucket's entries.
using bucket_digest = std::array<std::uint64_t, digest_buckets>;
/// One hash per sub-bucket; sub-bucket f lies in bucket f / sub_buckets, and
/// a bucket's hash is the XOR of its sub-buckets'.
using fine_digest = std::array<std::uint64_t, fine_buckets>;

/// Part of a digest bucket: the sub-buckets whose bits are set in `subs`.
struct bucket_part {
  std::size_t bucket = 0;
  std::uint64_t subs = ~std::uint64_t{0};
};

/// One replicated key: a live binding to a backend, or a tombstone.
struct entry {
  std::string key;      ///< opaque to the table; callers prefix it ("s/", "o/")
  std::string backend;  ///< backend name (stable across replicas); empty for tombstones
  std::string session;  ///< owning session key of an operation; empty for sessions
  version ver;
  bool deleted = false;
  std::uint64_t tombstone_expires_ms = 0;  ///< wall time after which a tombstone is dropped
  /// A live operation's start (wall ms; 0 unknown), so max_execution_secs
  /// counts from it on whichever replica the operation is reattached through.
  std::uint64_t started_ms = 0;
};

/// An entry as the table holds it, for reading in place (for_each): views
/// into the table, valid until it changes.
struct entry_view {
  std::string_view key, backend, session, node;
  hlc_time time;
  bool deleted = false;
  std::uint64_t tombstone_expires_ms = 0;
  std::uint64_t started_ms = 0;
  entry to_entry() const;
};

/// What a merge did.
struct merge_result {
  bool applied = false;  ///< the incoming entry is now the one in force
  /// Two live entries named different backends: the incoming one replaced a
  /// live local one, or lost against it. Replicas count it whichever of two
  /// concurrent writes reaches them first.
  bool conflict = false;
  std::optional<entry> previous;  ///< the entry replaced, when applied over one
};

/// Last-writer-wins map from key to entry, with an incrementally maintained
/// anti-entropy digest. One actor owns it and alone changes it or reads it
/// through the other members; live_backend() may be called from any thread
/// meanwhile (the router's look-ups, which thus never wait in the owner's
/// mailbox behind a repair batch): it takes a shared lock, each change an
/// exclusive one for that entry alone.
///
/// Compact, because every replica holds every binding of the cluster: an entry
/// is one allocation (core::packed_map: a 32-byte head, then the bytes of key,
/// session and backend), node names are stored once and referred to by number.
/// About 115 bytes per session binding (docs/performance.md), where a
/// std::unordered_map of `entry` took 400.
class replicated_table {
 public:
  /// Applies `incoming` when its version is newer than the local one (or the
  /// key is absent); an equal or older version changes nothing.
  merge_result merge(const entry& incoming);

  /// Local write binding `key` to `backend` (an operation: started at
  /// `started_ms`, 0 unknown). Returns the entry in force: the new one, or the
  /// local one when it holds a newer version.
  entry put(const std::string& key, std::string backend, std::string session, version ver,
            std::uint64_t started_ms = 0);

  /// Local delete: leaves a tombstone at `ver` that expire_tombstones() drops
  /// once the wall clock reaches `now_wall_ms + tombstone_ttl_ms`. Returns the
  /// entry in force, as put().
  entry erase(const std::string& key, version ver, std::uint64_t tombstone_ttl_ms, std::uint64_t now_wall_ms);

  /// The entry for `key`, tombstone included; nullopt when absent.
  std::optional<entry> find(std::string_view key) const;

  /// The backend a live entry for `key` names; empty when there is none or
  /// it is a tombstone. Thread-safe (see the class comment).
  std::string live_backend(std::string_view key) const;
  /// Whether `key`'s entry is a tombstone (released, not yet expired).
  /// Thread-safe, as live_backend().
  bool released(std::string_view key) const;

  /// The per-bucket hashes: each the XOR of its sub-buckets' (fine()).
  bucket_digest digest() const;
  /// The per-sub-bucket hashes; O(1), they are kept up to date on every change.
  const fine_digest& fine() const { return fine_hashes_; }

  /// Every entry of bucket `b` (tombstones included) in the sub-buckets set
  /// in `subs` (all by default), in no particular order; empty when `b` is
  /// out of range.
  std::vector<entry> bucket_entries(std::size_t b, std::uint64_t subs = ~std::uint64_t{0}) const;

  /// Calls `f(const entry_view&)` for the entries of bucket `b` in the
  /// sub-buckets set in `subs`, without copying (none when `b` is out of
  /// range); `f` must not change the table.
  template <class F>
  void for_each_in(std::size_t b, std::uint64_t subs, F&& f) const {
    if (b >= digest_buckets || subs == 0) return;
    const bool all = subs == ~std::uint64_t{0};
    shards_[b].for_each([&](const shard::item& it) {
      if (all || ((subs >> (fine_bucket_of(it.key()) % sub_buckets)) & 1)) f(view(it));
    });
  }
  /// Entries held in bucket `b`, tombstones included (0 out of range).
  std::size_t bucket_size(std::size_t b) const { return b < digest_buckets ? shards_[b].size() : 0; }

  /// for_each_in over the slots [from, from + slots) of bucket `b`'s map, for
  /// a pass over one bucket in steps; returns the slot after the last one
  /// visited, bucket_slots(b) or more once past its end.
  template <class F>
  std::size_t for_each_in_slots(std::size_t b, std::uint64_t subs, std::size_t from, std::size_t slots, F&& f) const {
    if (b >= digest_buckets) return from;
    const bool all = subs == ~std::uint64_t{0};
    return shards_[b].for_each_slots(from, slots, [&](const shard::item& it) {
      if (all || ((subs >> (fine_bucket_of(it.key()) % sub_buckets)) & 1)) f(view(it));
    });
  }
  /// The slots of bucket `b`'s map (0 out of range).
  std::size_t bucket_slots(std::size_t b) const { return b < digest_buckets ? shards_[b].capacity() : 0; }
  /// How many times entries of bucket `b` changed slots (core::packed_map::moves):
  /// a pass in steps over it that sees this change starts over.
  std::uint64_t bucket_moves(std::size_t b) const { return b < digest_buckets ? shards_[b].moves() : 0; }

  /// Drops tombstones whose expiry is at or before `now_wall_ms`; returns how many.
  std::size_t expire_tombstones(std::uint64_t now_wall_ms);
  /// The same for one key (what a pass in steps found): whether it was dropped.
  bool expire_tombstone(std::string_view key, std::uint64_t now_wall_ms);

  /// Entries held, tombstones included.
  std::size_t size() const { return size_; }
  /// Entries held that are not tombstones.
  std::size_t live_count() const { return live_; }

  /// Every entry (tombstones included) in no particular order, copied.
  std::vector<entry> all() const;

  /// Calls `f(const entry_view&)` for every entry, without copying; `f` must
  /// not change the table.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& s : shards_) s.for_each([&](const shard::item& it) { f(view(it)); });
  }

  /// Where a pass over the table in steps (for_each_step) is.
  struct cursor {
    std::size_t shard = 0, slot = 0;
    bool done() const { return shard >= digest_buckets; }
  };

  /// Calls `f(const entry_view&)` for the entries of about `slots` slots from
  /// `at`, and returns where the next step starts. Between steps the table
  /// may change: a pass then misses or revisits the entries a growth moved
  /// (a periodic pass catches them the next time).
  template <class F>
  cursor for_each_step(cursor at, std::size_t slots, F&& f) const {
    while (!at.done() && slots > 0) {
      const auto& s = shards_[at.shard];
      const std::size_t before = at.slot;
      at.slot = s.for_each_slots(at.slot, slots, [&](const shard::item& it) { f(view(it)); });
      slots -= std::min(slots, std::max<std::size_t>(at.slot - before, 1));
      if (at.slot >= s.capacity()) at = {at.shard + 1, 0};
    }
    return at;
  }

  /// The digest bucket of `key`; the same on every replica.
  static std::size_t bucket_of(std::string_view key);
  /// The sub-bucket of `key` in the fine digest (in bucket_of(key)); the same on every replica.
  static std::size_t fine_bucket_of(std::string_view key);

  /// What an entry contributes to its bucket's hash: a stable hash of key,
  /// version and deleted flag (a version names one write, so the rest follows).
  static std::uint64_t entry_hash(const entry& e);

 private:
  /// What an entry holds besides its key and its tail (session, backend, and
  /// a tombstone's expiry or an operation's start): 24 bytes, 32 with the
  /// map's sizes.
  struct head {
    std::uint64_t wall_ms;
    std::uint32_t logical;
    std::uint32_t node;  // in names_: the few replicas there are
    std::uint32_t session_size;
    bool deleted;
    bool stamped;  // the tail ends with 8 bytes: the expiry (deleted) or the start
  };
  /// One digest bucket's entries.
  using shard = core::packed_map<head>;

  // Last-writer-wins core of merge, put and erase; returns the entry in force.
  entry upsert(const entry& incoming, merge_result& result);
  void account(std::size_t fine, const entry& e, bool adding);
  void account(std::size_t fine, std::uint64_t hash, bool deleted, bool adding);
  /// An item's layout for `e`: its tail's size, its head.
  static std::size_t tail_size(const entry& e);
  head head_of(const entry& e);
  /// Writes `e`'s tail into `it`, whose head is head_of(e).
  static void write_tail(shard::item& it, const entry& e);
  /// Makes `it` (in `s`) hold `e`, a newer version of its key, whose head is
  /// `h` and tail `size` bytes; `it` moves when the tail's size changes.
  void replace(shard& s, shard::item*& it, const entry& e, const head& h, std::size_t size);
  entry_view view(const shard::item& it) const;
  std::uint32_t name_id(std::string_view name);

  mutable std::shared_mutex mutex_;  // shared: live_backend(), released(); exclusive: each change
  std::array<shard, digest_buckets> shards_;
  std::deque<std::string> names_;  // node names (version.node), by number; views stay valid
  std::unordered_map<std::string, std::uint32_t> name_ids_;
  fine_digest fine_hashes_{};
  std::size_t size_ = 0;
  std::size_t live_ = 0;
};

/// What a replica does with a live binding in its periodic pass.
enum class fate { keep, touch, expire };

/// A binding written (versioned) at wall time `written`, last used here at
/// `used` (0: not used here), seen at `wall`, with time to live `ttl` (all ms).
/// A replica that uses a binding writes it again (touch) once the use is a
/// quarter ttl past the version, so others learn it is alive. The last use
/// anywhere may thus lie up to ttl/4 after the version: a binding expires
/// only when neither that nor a local use is within the ttl.
fate binding_fate(std::int64_t written, std::int64_t used, std::int64_t wall, std::int64_t ttl);
/// Whether binding_fate is `keep` whatever the use: a version at most a
/// quarter ttl old is neither due a touch nor near expiry, so a pass need not
/// look its use up (most of a table after a burst of new sessions or a sync).
bool kept_whatever_use(std::int64_t written, std::int64_t wall, std::int64_t ttl);

/// Indices of the buckets where two digests differ, ascending.
std::vector<std::size_t> differing_buckets(const bucket_digest& a, const bucket_digest& b);
/// The parts of buckets where two fine digests differ, by bucket ascending.
std::vector<bucket_part> differing_parts(const fine_digest& a, const fine_digest& b);

}  // namespace scg::cluster

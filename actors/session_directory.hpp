#pragma once
// The router's directory of the sessions bound at this replica: each key
// with a value (the session's actor, null while the session is idle). Split
// in 64 maps by the key's hash, so that growing rehashes a sixty-fourth of
// it at a time: one std::unordered_map of 712,697 sessions took 111 ms to
// rehash on the project's machine, and the router, which owns the directory,
// placed no session meanwhile. Not thread-safe: its actor alone uses it.

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace scg::actors {

template <class V>
class session_directory {
 public:
  static constexpr std::size_t shard_count = 64;

  /// Where a pass over the directory in steps is (for_each_step).
  struct cursor {
    std::size_t shard = 0, bucket = 0;
    bool done() const { return shard >= shard_count; }
  };

  /// The value of `key`, made (value-initialised) when absent.
  V& try_emplace(const std::string& key) { return shard(key).try_emplace(key).first->second; }
  /// The value of `key`, or nullptr.
  V* find(const std::string& key) {
    auto& s = shard(key);
    auto it = s.find(key);
    return it == s.end() ? nullptr : &it->second;
  }
  /// Removes `key`; false when it was absent.
  bool erase(const std::string& key) { return shard(key).erase(key) > 0; }

  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& s : shards_) n += s.size();
    return n;
  }

  /// Calls `f(key, value)` for every entry; `f` must not add or remove any.
  template <class F>
  void for_each(F&& f) {
    for (auto& s : shards_)
      for (auto& [key, value] : s) f(key, value);
  }

  /// Calls `f(key, value)` for the entries of about `buckets` buckets from
  /// `at`, and returns where the next step starts; `f` must not add or
  /// remove entries. Between steps the directory may change: a rehash moves
  /// entries between buckets, so a pass may miss or revisit some.
  template <class F>
  cursor for_each_step(cursor at, std::size_t buckets, F&& f) {
    while (!at.done() && buckets > 0) {
      auto& s = shards_[at.shard];
      const std::size_t end = std::min(s.bucket_count(), at.bucket + buckets);
      for (std::size_t b = at.bucket; b < end; ++b)
        for (auto it = s.begin(b); it != s.end(b); ++it) f(it->first, it->second);
      buckets -= std::min(buckets, std::max<std::size_t>(end - std::min(end, at.bucket), 1));
      at = end >= s.bucket_count() ? cursor{at.shard + 1, 0} : cursor{at.shard, end};
    }
    return at;
  }

 private:
  using map = std::unordered_map<std::string, V>;
  // The top 6 bits: the maps' own buckets take the hash modulo their (prime) size.
  static_assert(shard_count == 64);
  map& shard(const std::string& key) {
    return shards_[std::hash<std::string>{}(key) >> (std::numeric_limits<std::size_t>::digits - 6)];
  }

  std::array<map, shard_count> shards_;
};

}  // namespace scg::actors

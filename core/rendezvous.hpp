#pragma once
// Stable hashing and rendezvous ownership. Replicas compare hashes and pick
// owners independently, so the same bytes must hash the same in every process
// on every machine: nothing here uses std::hash.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace scg::core {

/// Incremental 64-bit hash that never changes across processes, builds or
/// machines: FNV-1a over the bytes fed in, finished by a 64-bit mixer so that
/// every output bit depends on every input bit. Strings are length-prefixed,
/// so feeding ("ab", "c") and ("a", "bc") give different hashes.
class stable_hasher {
 public:
  /// Feeds the length of `s`, then its bytes.
  stable_hasher& add(std::string_view s);

  /// Feeds `v` as 8 little-endian bytes, whatever the host's byte order.
  stable_hasher& add(std::uint64_t v);

  /// The hash of everything fed so far; the hasher stays usable.
  std::uint64_t finish() const;

 private:
  void feed(const unsigned char* bytes, std::size_t n);
  std::uint64_t state_ = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
};

/// Stable 64-bit hash of one string (see stable_hasher).
std::uint64_t stable_hash(std::string_view s);

/// The member that owns `key`: highest-random-weight hashing of (member, key),
/// ties to the smaller name. Independent of the order of `members`; removing a
/// member moves only the keys it owned. Empty when `members` is empty.
std::string owner_of(std::string_view key, const std::vector<std::string>& members);

}  // namespace scg::core

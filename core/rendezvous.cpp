#include "core/rendezvous.hpp"

namespace scg::core {

stable_hasher& stable_hasher::add(std::string_view s) {
  add(static_cast<std::uint64_t>(s.size()));
  feed(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  return *this;
}

stable_hasher& stable_hasher::add(std::uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  feed(bytes, sizeof bytes);
  return *this;
}

std::uint64_t stable_hasher::finish() const {
  // FNV-1a alone mixes the last bytes poorly into the high bits, which
  // rendezvous weights compare; a murmur-style finalizer spreads them.
  std::uint64_t h = state_;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb93fe53a3ed5ull;
  h ^= h >> 33;
  return h;
}

void stable_hasher::feed(const unsigned char* bytes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    state_ ^= bytes[i];
    state_ *= 0x100000001b3ull;  // FNV-1a 64-bit prime
  }
}

std::uint64_t stable_hash(std::string_view s) { return stable_hasher{}.add(s).finish(); }

std::string owner_of(std::string_view key, const std::vector<std::string>& members) {
  const std::string* best = nullptr;
  std::uint64_t best_weight = 0;
  for (const auto& m : members) {
    const std::uint64_t w = stable_hasher{}.add(m).add(key).finish();
    if (!best || w > best_weight || (w == best_weight && m < *best)) {
      best = &m;
      best_weight = w;
    }
  }
  return best ? *best : std::string{};
}

}  // namespace scg::core

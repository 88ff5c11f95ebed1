#pragma once
// Hybrid logical clock: wall-clock milliseconds plus a logical counter, so
// timestamps follow real time closely yet never go backwards and always move
// past anything a replica has heard of. A version is such a time plus the node
// that wrote it; two replicas never produce equal versions.

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>

namespace scg::cluster {

/// A point in hybrid logical time, ordered by (wall_ms, logical).
struct hlc_time {
  std::uint64_t wall_ms = 0;
  std::uint32_t logical = 0;
};

inline bool operator==(const hlc_time& a, const hlc_time& b) {
  return a.wall_ms == b.wall_ms && a.logical == b.logical;
}
inline bool operator!=(const hlc_time& a, const hlc_time& b) { return !(a == b); }
inline bool operator<(const hlc_time& a, const hlc_time& b) {
  return std::tie(a.wall_ms, a.logical) < std::tie(b.wall_ms, b.logical);
}
inline bool operator>(const hlc_time& a, const hlc_time& b) { return b < a; }
inline bool operator<=(const hlc_time& a, const hlc_time& b) { return !(b < a); }
inline bool operator>=(const hlc_time& a, const hlc_time& b) { return !(a < b); }

/// Milliseconds since the Unix epoch on the system clock: the usual wall clock.
std::uint64_t system_wall_ms();

/// Hybrid logical clock over an injected wall clock. Every time it hands out
/// is greater than every time it handed out or observed before. Not thread-safe.
class hlc {
 public:
  /// `wall_clock_ms` is read on every now() and observe(); it may stall or go back.
  explicit hlc(std::function<std::uint64_t()> wall_clock_ms);

  /// A fresh time for a local event: the wall clock when it moved past the
  /// last time, else the last time with its logical counter incremented.
  hlc_time now();

  /// Merges a time received from a peer; returns a fresh time greater than
  /// both `remote` and every time handed out before.
  hlc_time observe(hlc_time remote);

  /// The last time handed out (zero before the first).
  hlc_time last() const { return last_; }

 private:
  std::function<std::uint64_t()> wall_clock_ms_;
  hlc_time last_;
};

/// Who wrote what when: totally ordered by (time, node), so concurrent writes
/// from different replicas are still ordered the same way everywhere.
struct version {
  hlc_time time;
  std::string node;  ///< the writer's configured node_name
};

inline bool operator==(const version& a, const version& b) {
  return a.time == b.time && a.node == b.node;
}
inline bool operator!=(const version& a, const version& b) { return !(a == b); }
inline bool operator<(const version& a, const version& b) {
  if (a.time != b.time) return a.time < b.time;
  return a.node < b.node;
}
inline bool operator>(const version& a, const version& b) { return b < a; }
inline bool operator<=(const version& a, const version& b) { return !(b < a); }
inline bool operator>=(const version& a, const version& b) { return !(a < b); }

}  // namespace scg::cluster

#pragma once
// The keys this replica wrote lately, oldest first, for hinted handoff: when
// a member comes back after a partition or a freeze, it is sent the entries
// of the keys written here since it was last heard from (their versions in
// force now), so the bindings made on both sides agree within a round trip
// instead of waiting for a digest repair of every bucket the split touched.
// Bounded by count; when the oldest key goes, the log no longer reaches back
// past its time, and a member down since before then is repaired by digest.
// Pure: no actors (tests/unit/write_log_test.cpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace scg::cluster {

/// From when (wall ms) writes sent to a member seen down at `now_ms` may
/// have been lost, so are handed to it when it is back: since it was last
/// heard (`last_seen_ms`) or since its link went silent long enough to be
/// dropped (`silence_ms`: the connection time-out and a heartbeat),
/// whichever is earlier, less `margin_ms` for writes lost on the way.
inline std::int64_t missed_since_ms(std::int64_t last_seen_ms, std::int64_t now_ms, std::int64_t silence_ms,
                                    std::int64_t margin_ms) {
  return std::min(last_seen_ms, now_ms - silence_ms) - margin_ms;
}

class write_log {
 public:
  explicit write_log(std::size_t capacity) : capacity_(capacity) {}

  /// `key` was written here at wall time `wall_ms`.
  void add(std::string key, std::int64_t wall_ms);

  /// The distinct keys written at or after `since_ms`, in the order of their
  /// last write; nullopt when a key written at or after it was dropped.
  std::optional<std::vector<std::string>> since(std::int64_t since_ms) const;

  std::size_t size() const { return items_.size(); }

 private:
  std::size_t capacity_;
  std::deque<std::pair<std::int64_t, std::string>> items_;
  /// The newest time of a dropped key: the log reaches back to just after it.
  std::int64_t dropped_up_to_ = std::numeric_limits<std::int64_t>::min();
};

}  // namespace scg::cluster

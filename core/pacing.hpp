#pragma once
// Pacing of housekeeping done in steps (a pass over a large table): the wait
// before the next step that keeps the pass's work within a share of one
// core. Pure; the cluster actor's refresh pass and the router's idle-session
// sweep use it.

#include <chrono>
#include <cstdint>

namespace scg::core {

/// The wait before the next step of a pass that began `elapsed` ago and has
/// worked `work` since, so that its work stays at most `share` (0 < share
/// <= 1) of its time; zero when the next step may come at once.
inline std::chrono::microseconds pace_delay(std::chrono::microseconds work, std::chrono::microseconds elapsed,
                                            double share) {
  const auto due = static_cast<std::int64_t>(static_cast<double>(work.count()) / share) - elapsed.count();
  return std::chrono::microseconds(due > 0 ? due : 0);
}

}  // namespace scg::core

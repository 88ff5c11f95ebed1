#pragma once
// One log line per event kind and period: a flood of the same event (silent
// connections, a full descriptor table) logs once, then says how many it held back.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace scg::core {

class log_throttle {
 public:
  explicit log_throttle(std::chrono::milliseconds period = std::chrono::seconds(10)) : period_ms_(period.count()) {}

  /// -1: hold this line back; otherwise log it, with the number held back since the last.
  std::int64_t pass() {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    auto next = next_ms_.load(std::memory_order_relaxed);
    if (now < next || !next_ms_.compare_exchange_strong(next, now + period_ms_)) {
      held_.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
    return held_.exchange(0, std::memory_order_relaxed);
  }

 private:
  const std::int64_t period_ms_;
  std::atomic<std::int64_t> next_ms_{0};
  std::atomic<std::int64_t> held_{0};
};

}  // namespace scg::core

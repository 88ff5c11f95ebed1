#include "actors/health.hpp"

#include <algorithm>
#include <limits>

namespace scg::actors {

health_streak::health_streak(int failures_to_down, int successes_to_up, bool initially_healthy)
    : failures_to_down_(std::max(failures_to_down, 1)),
      successes_to_up_(std::max(successes_to_up, 1)),
      healthy_(initially_healthy) {}

health_streak::change health_streak::record(bool success) {
  if (streak_ == 0 || success != last_success_) {
    last_success_ = success;
    streak_ = 1;
  } else if (streak_ < std::numeric_limits<int>::max()) {
    // Saturates: a backend down for years must not overflow the count.
    ++streak_;
  }
  if (success && !healthy_ && streak_ >= successes_to_up_) {
    healthy_ = true;
    return change::became_healthy;
  }
  if (!success && healthy_ && streak_ >= failures_to_down_) {
    healthy_ = false;
    return change::became_unhealthy;
  }
  return change::none;
}

bool health_streak::healthy() const { return healthy_; }

int health_streak::streak() const { return streak_; }

}  // namespace scg::actors

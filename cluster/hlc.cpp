#include "cluster/hlc.hpp"

#include <chrono>
#include <limits>
#include <utility>

namespace scg::cluster {

namespace {

// The smallest time after `t`. A counter at its limit carries into the wall
// part: the clock runs a millisecond ahead rather than wrap and go back.
hlc_time successor(hlc_time t) {
  if (t.logical == std::numeric_limits<std::uint32_t>::max()) return {t.wall_ms + 1, 0};
  return {t.wall_ms, t.logical + 1};
}

}  // namespace

std::uint64_t system_wall_ms() {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  return ms < 0 ? 0 : static_cast<std::uint64_t>(ms);
}

hlc::hlc(std::function<std::uint64_t()> wall_clock_ms)
    : wall_clock_ms_(std::move(wall_clock_ms)) {}

hlc_time hlc::now() {
  const std::uint64_t wall = wall_clock_ms_();
  last_ = wall > last_.wall_ms ? hlc_time{wall, 0} : successor(last_);
  return last_;
}

hlc_time hlc::observe(hlc_time remote) {
  const std::uint64_t wall = wall_clock_ms_();
  // Whichever of the two is ahead sets the floor; the wall clock only takes
  // over when it has passed both.
  const hlc_time base = remote > last_ ? remote : last_;
  last_ = wall > base.wall_ms ? hlc_time{wall, 0} : successor(base);
  return last_;
}

}  // namespace scg::cluster

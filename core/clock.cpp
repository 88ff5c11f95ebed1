#include "core/clock.hpp"

#include <chrono>

namespace scg::core {

clock_ms now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::int64_t wall_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::int64_t wall_of(clock_ms steady) { return wall_now_ms() - (now_ms() - steady); }
clock_ms steady_of(std::int64_t wall_ms) { return now_ms() - (wall_now_ms() - wall_ms); }

}  // namespace scg::core

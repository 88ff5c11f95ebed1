#include "core/pacing.hpp"

#include <catch2/catch.hpp>

using scg::core::pace_delay;
using us = std::chrono::microseconds;

TEST_CASE("a paced pass waits until its work is back within its share of one core", "[pacing]") {
  // 1 ms of work at a tenth of a core is due 10 ms after the pass began.
  CHECK(pace_delay(us(1000), us(1000), 0.1) == us(9000));
  CHECK(pace_delay(us(1000), us(4000), 0.1) == us(6000));
  CHECK(pace_delay(us(1000), us(10000), 0.1) == us(0));
  CHECK(pace_delay(us(1000), us(25000), 0.1) == us(0));  // behind: no wait, never negative
  // A whole core: never a wait.
  CHECK(pace_delay(us(5000), us(5000), 1.0) == us(0));
  // A quarter of a core, the refresh pass's share.
  CHECK(pace_delay(us(2500), us(2500), 0.25) == us(7500));
  CHECK(pace_delay(us(0), us(0), 0.25) == us(0));
}

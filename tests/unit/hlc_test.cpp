#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "cluster/hlc.hpp"

using scg::cluster::hlc;
using scg::cluster::hlc_time;
using scg::cluster::version;

TEST_CASE("the clock moves forward while the wall clock stands still", "[hlc]") {
  std::uint64_t wall = 1000;
  hlc clock{[&] { return wall; }};
  hlc_time a = clock.now();
  hlc_time b = clock.now();
  hlc_time c = clock.now();
  CHECK(a == hlc_time{1000, 0});
  CHECK(b == hlc_time{1000, 1});
  CHECK(c == hlc_time{1000, 2});
  wall = 1001;
  CHECK(clock.now() == hlc_time{1001, 0});  // the wall clock takes over again
}

TEST_CASE("the clock never goes back when the wall clock does", "[hlc]") {
  std::uint64_t wall = 1000;
  hlc clock{[&] { return wall; }};
  hlc_time before = clock.now();
  wall = 500;
  hlc_time after = clock.now();
  CHECK(before < after);
  CHECK(after == hlc_time{1000, 1});
  CHECK(clock.now() == hlc_time{1000, 2});
  wall = 2000;
  CHECK(clock.now() == hlc_time{2000, 0});
}

TEST_CASE("observing a remote time moves the clock past it", "[hlc]") {
  std::uint64_t wall = 1000;
  hlc clock{[&] { return wall; }};
  clock.now();

  SECTION("a remote clock ahead of us") {
    CHECK(clock.observe({5000, 7}) == hlc_time{5000, 8});
    CHECK(clock.now() == hlc_time{5000, 9});  // our wall clock is still behind
  }
  SECTION("a remote clock behind us") {
    hlc_time last = clock.last();
    hlc_time t = clock.observe({10, 3});
    CHECK(t > last);
    CHECK(t > hlc_time{10, 3});
  }
  SECTION("a remote time at our wall time with a larger counter") {
    clock.now();  // {1000, 1}
    CHECK(clock.observe({1000, 5}) == hlc_time{1000, 6});
  }
  SECTION("a wall clock past both") {
    wall = 6000;
    CHECK(clock.observe({5000, 9}) == hlc_time{6000, 0});
  }
}

TEST_CASE("a logical counter at its limit carries into the wall time", "[hlc]") {
  std::uint64_t wall = 1000;
  hlc clock{[&] { return wall; }};
  const auto max = std::numeric_limits<std::uint32_t>::max();
  hlc_time t = clock.observe({1000, max});
  CHECK(t == hlc_time{1001, 0});
  CHECK(t > hlc_time{1000, max});
}

TEST_CASE("versions order by time, then by node name", "[hlc]") {
  version a{{1000, 0}, "b"};
  version b{{1000, 0}, "a"};
  version c{{1000, 1}, "a"};
  CHECK(b < a);
  CHECK(a < c);  // time wins over node
  CHECK(a != b);
  CHECK(a == version{{1000, 0}, "b"});
  CHECK_FALSE(a < a);
}

#include <catch2/catch.hpp>

#include <vector>

#include "actors/health.hpp"

using namespace scg::actors;
using change = health_streak::change;

namespace {

/// Feeds `results` in order and returns the change each one caused.
std::vector<change> feed(health_streak& h, std::vector<bool> results) {
  std::vector<change> changes;
  for (bool r : results) changes.push_back(h.record(r));
  return changes;
}

}  // namespace

TEST_CASE("three failures in a row take a healthy backend down", "[health]") {
  health_streak h(3, 2);
  CHECK(h.healthy());
  CHECK(feed(h, {false, false}) == std::vector<change>{change::none, change::none});
  CHECK(h.healthy());
  CHECK(h.record(false) == change::became_unhealthy);
  CHECK_FALSE(h.healthy());
  CHECK(h.streak() == 3);
}

TEST_CASE("the transition is reported once, when it happens", "[health]") {
  health_streak h(3, 2);
  CHECK(feed(h, {false, false, false, false, false}) ==
        std::vector<change>{change::none, change::none, change::became_unhealthy, change::none,
                            change::none});
  CHECK(h.streak() == 5);
  CHECK(feed(h, {true, true, true, true}) ==
        std::vector<change>{change::none, change::became_healthy, change::none, change::none});
  CHECK(h.healthy());
  CHECK(h.streak() == 4);
}

TEST_CASE("two successes in a row bring an unhealthy backend back", "[health]") {
  health_streak h(3, 2, /*initially_healthy=*/false);
  CHECK_FALSE(h.healthy());
  CHECK(h.record(true) == change::none);
  CHECK_FALSE(h.healthy());
  CHECK(h.record(true) == change::became_healthy);
  CHECK(h.healthy());
}

TEST_CASE("a success resets the failure streak", "[health]") {
  health_streak h(3, 2);
  CHECK(feed(h, {false, false, true, false, false}) == std::vector<change>(5, change::none));
  CHECK(h.healthy());
  CHECK(h.streak() == 2);
  CHECK(h.record(false) == change::became_unhealthy);
}

TEST_CASE("a failure resets the success streak", "[health]") {
  health_streak h(3, 2, false);
  CHECK(feed(h, {true, false, true, false, true}) == std::vector<change>(5, change::none));
  CHECK_FALSE(h.healthy());
  CHECK(h.streak() == 1);
  CHECK(h.record(true) == change::became_healthy);
}

TEST_CASE("alternating results never change the state", "[health]") {
  health_streak up(3, 2);
  health_streak down(3, 2, false);
  for (int i = 0; i < 100; ++i) {
    CHECK(up.record(i % 2 == 0) == change::none);
    CHECK(down.record(i % 2 == 0) == change::none);
    CHECK(up.streak() == 1);
  }
  CHECK(up.healthy());
  CHECK_FALSE(down.healthy());
}

TEST_CASE("successes on a healthy backend and failures on a down one change nothing", "[health]") {
  health_streak h(3, 2);
  CHECK(feed(h, {true, true, true}) == std::vector<change>(3, change::none));
  CHECK(h.streak() == 3);
  health_streak d(3, 2, false);
  CHECK(feed(d, {false, false, false, false}) == std::vector<change>(4, change::none));
  CHECK_FALSE(d.healthy());
}

TEST_CASE("the streak is zero before any result", "[health]") {
  health_streak h(3, 2);
  CHECK(h.streak() == 0);
}

TEST_CASE("thresholds below one act as one", "[health]") {
  health_streak h(0, -5);
  CHECK(h.record(false) == change::became_unhealthy);
  CHECK(h.record(true) == change::became_healthy);
  CHECK(h.record(false) == change::became_unhealthy);
}

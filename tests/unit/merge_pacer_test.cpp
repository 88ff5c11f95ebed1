// cluster/merge_pacer.hpp: how long a repair's acknowledgment is held back.
#include <catch2/catch.hpp>

#include "cluster/merge_pacer.hpp"

using scg::cluster::merge_pacer;
using ms = std::chrono::milliseconds;
using us = std::chrono::microseconds;

namespace {

// A burst at 0.5 of a core, its first 20 ms of work free, 1 s between bursts.
merge_pacer pacer() { return merge_pacer(0.5, us(20'000), std::chrono::seconds(1)); }

const auto t0 = merge_pacer::clock::time_point{} + std::chrono::hours(1);

}  // namespace

TEST_CASE("a burst's first work is acknowledged at once", "[cluster][pacing]") {
  auto p = pacer();
  CHECK(p.merged(t0, t0 + ms(5)) == us(0));
  CHECK(p.merged(t0 + ms(5), t0 + ms(15)) == us(0));  // 15 ms of work: still free
}

TEST_CASE("past its free work a burst is paced to its share of one core", "[cluster][pacing]") {
  auto p = pacer();
  CHECK(p.merged(t0, t0 + ms(30)) == us(30'000));  // 30 ms of work in 30 ms: due at 60
  // The next message merged at once after: 40 ms of work in 40 ms, due at 80.
  CHECK(p.merged(t0 + ms(30), t0 + ms(40)) == us(40'000));
  // One after a pause within the burst: 50 ms of work, 100 ms since it began.
  CHECK(p.merged(t0 + ms(90), t0 + ms(100)) == us(0));
}

TEST_CASE("a message after a gap starts a new burst, its work free again", "[cluster][pacing]") {
  auto p = pacer();
  CHECK(p.merged(t0, t0 + ms(30)) > us(0));
  const auto later = t0 + ms(30) + std::chrono::seconds(2);
  CHECK(p.merged(later, later + ms(10)) == us(0));
}

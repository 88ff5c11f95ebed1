#include <catch2/catch.hpp>

#include <map>

#include "actors/placement.hpp"

using namespace scg::actors;

TEST_CASE("round robin steps through eligible backends only", "[placement]") {
  placement_policy p;
  p.kind = placement_policy::strategy::round_robin;
  std::vector<candidate> b(3);
  b[1].eligible = false;
  std::uint64_t cursor = 0;
  std::vector<std::size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(*place(p, b, cursor));
  CHECK(std::count(picks.begin(), picks.end(), 1u) == 0);
  CHECK(std::count(picks.begin(), picks.end(), 0u) >= 2);
  CHECK(std::count(picks.begin(), picks.end(), 2u) >= 2);
}

TEST_CASE("no eligible backend means no placement", "[placement]") {
  placement_policy p;
  std::vector<candidate> b(2);
  b[0].eligible = b[1].eligible = false;
  std::uint64_t cursor = 0;
  CHECK_FALSE(place(p, b, cursor));
  CHECK_FALSE(place(p, {}, cursor));
}

TEST_CASE("least loaded picks the lowest score", "[placement]") {
  placement_policy p;  // w_u 0.9, w_s 0.1, cap 50
  std::vector<candidate> b(3);
  b[0].utilization = 0.8;
  b[1].utilization = 0.2;
  b[1].sessions = 50;  // full: 0.18 + 0.1 = 0.28
  b[2].utilization = 0.3;  // 0.27
  std::uint64_t cursor = 0;
  for (int i = 0; i < 5; ++i) CHECK(*place(p, b, cursor) == 2);
  CHECK(score(p, b[1]) == Approx(0.28));
  CHECK(score(p, b[0]) == Approx(0.72));
}

TEST_CASE("a burst of new sessions spreads when bindings are counted at once", "[placement]") {
  placement_policy p;
  std::vector<candidate> b(3);
  std::uint64_t cursor = 0;
  for (int i = 0; i < 30; ++i) b[*place(p, b, cursor)].sessions++;
  for (const auto& c : b) CHECK(c.sessions == 10);
}

TEST_CASE("strategy names parse and unknown ones do not", "[placement]") {
  CHECK(parse_strategy("round_robin") == placement_policy::strategy::round_robin);
  CHECK(parse_strategy("least_loaded") == placement_policy::strategy::least_loaded);
  CHECK_FALSE(parse_strategy("fastest"));
}

TEST_CASE("shedding holds only when every eligible backend scores above the line", "[placement]") {
  placement_policy p;  // 0.9 × utilization + 0.1 × fill
  std::vector<candidate> b(3);
  b[0].utilization = 0.95;
  b[1].utilization = 0.99;
  b[2].utilization = 0.1;
  b[2].eligible = false;  // an idle backend that cannot take sessions does not help
  CHECK(all_above(p, b, 0.8));
  b[1].utilization = 0.5;
  CHECK_FALSE(all_above(p, b, 0.8));
  b[0].eligible = b[1].eligible = false;
  CHECK_FALSE(all_above(p, b, 0.8));  // nothing eligible: "no backend", not shedding
}

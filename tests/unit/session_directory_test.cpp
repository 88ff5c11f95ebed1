#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "actors/session_directory.hpp"

using scg::actors::session_directory;

TEST_CASE("the session directory finds, changes and forgets keys across its shards", "[router][directory]") {
  session_directory<int> d;
  for (int i = 0; i < 5000; ++i) d.try_emplace("t/u/" + std::to_string(i)) = i;
  CHECK(d.size() == 5000);
  REQUIRE(d.find("t/u/4321"));
  CHECK(*d.find("t/u/4321") == 4321);
  CHECK(d.try_emplace("t/u/4321") == 4321);  // present: kept as it is
  CHECK(d.find("t/u/none") == nullptr);
  CHECK(d.erase("t/u/7"));
  CHECK_FALSE(d.erase("t/u/7"));
  CHECK(d.find("t/u/7") == nullptr);
  CHECK(d.size() == 4999);
  long sum = 0;
  d.for_each([&](const std::string&, int& v) { sum += v; });
  CHECK(sum == 4999L * 5000 / 2 - 7);
}

TEST_CASE("a pass over the session directory in steps visits every key once, whatever the step", "[router][directory]") {
  for (std::size_t step : {1u, 7u, 2048u, 1u << 20}) {
    session_directory<int> d;
    for (int i = 0; i < 3000; ++i) d.try_emplace("k" + std::to_string(i));
    std::map<std::string, int> seen;
    session_directory<int>::cursor at;
    int steps = 0;
    while (!at.done() && steps < 1000000) {
      at = d.for_each_step(at, step, [&](const std::string& k, int&) { ++seen[k]; });
      ++steps;
    }
    CHECK(at.done());
    CHECK(seen.size() == 3000);
    CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second == 1; }));
  }
  // An empty directory: the pass ends, having called nothing.
  session_directory<int> empty;
  session_directory<int>::cursor at;
  int calls = 0, steps = 0;
  for (; !at.done() && steps < 1000; ++steps) at = empty.for_each_step(at, 16, [&](const std::string&, int&) { ++calls; });
  CHECK(at.done());
  CHECK(calls == 0);
}

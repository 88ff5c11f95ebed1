#include <catch2/catch.hpp>

#include <thread>

#include "core/events.hpp"

using scg::core::event_ring;

TEST_CASE("the event ring keeps the newest events in order", "[events]") {
  event_ring ring{3};
  for (int i = 1; i <= 5; ++i) CHECK(ring.record("rebind", "e" + std::to_string(i)) == std::uint64_t(i));
  auto kept = ring.since();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].text == "e3");
  CHECK(kept[2].text == "e5");
  CHECK(kept[2].kind == "rebind");
  CHECK(kept[2].time_ms > 0);
}

TEST_CASE("a poller asks the ring for what came after the last seq it saw", "[events]") {
  event_ring ring{10};
  ring.record("drain", "a");
  auto seq = ring.record("drain", "b");
  ring.record("shed", "c");
  auto fresh = ring.since(seq);
  REQUIRE(fresh.size() == 1);
  CHECK(fresh[0].text == "c");
  CHECK(ring.since(99).empty());
}

TEST_CASE("threads recording at once lose no event and never exceed the capacity", "[events]") {
  event_ring ring{200};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) ring.record("shed", "x");
    });
  for (auto& t : threads) t.join();
  auto kept = ring.since();
  CHECK(kept.size() == 200);
  CHECK(kept.back().seq == 4000);
  for (std::size_t i = 1; i < kept.size(); ++i) CHECK(kept[i].seq == kept[i - 1].seq + 1);
}

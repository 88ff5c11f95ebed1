#include "net/executions.hpp"

#include <catch2/catch.hpp>

using scg::net::execution_ledger;

TEST_CASE("an operation keeps its slot across its reattaches", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 1));
  l.adopt("op", "t", 1000);
  l.detach("op", 4000);  // the server cut the stream
  CHECK_FALSE(l.try_take("t", 1));  // the slot stays the operation's
  auto a = l.attach("op");
  REQUIRE(a);
  CHECK(a->started == 1000);
  CHECK_FALSE(a->killed);
  CHECK(l.in_use("t") == 1);
  l.finish("op");
  CHECK(l.in_use("t") == 0);
  CHECK(l.try_take("t", 1));
}

TEST_CASE("an ExecutePlan sent again with a known operation id does not take a second slot", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 2));
  l.adopt("op", "t", 10);
  REQUIRE(l.try_take("t", 2));
  l.adopt("op", "t", 20);
  CHECK(l.in_use("t") == 1);
  CHECK(l.attach("op")->started == 10);
}

TEST_CASE("a continuation seen first here is never refused and takes a free slot", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 1));  // someone else's execution fills the cap
  auto a = l.attach_unknown("op", "t", 1, 500);
  CHECK(a.started == 500);
  CHECK(l.in_use("t") == 1);  // no slot free: it runs without one
  l.finish("op");
  CHECK(l.in_use("t") == 1);
  auto b = l.attach_unknown("op2", "u", 1, 600);
  CHECK(l.in_use("u") == 1);
  (void)b;
}

TEST_CASE("a killed operation frees its slot and its reattach is told so until it expires", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 1));
  l.adopt("op", "t", 0);
  l.kill("op", 5000);
  CHECK(l.in_use("t") == 0);
  auto a = l.attach("op");
  REQUIRE(a);
  CHECK(a->killed);
  CHECK(l.expire(5000 + 299, 300) == 0);
  CHECK(l.expire(5000 + 300, 300) == 1);
  CHECK_FALSE(l.attach("op"));
}

TEST_CASE("a detached operation is forgotten after the ttl, an attached one never", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 0));
  l.adopt("gone", "t", 0);
  REQUIRE(l.try_take("t", 0));
  l.adopt("busy", "t", 0);
  l.detach("gone", 100);
  CHECK(l.expire(100 + 1000, 1000) == 1);
  CHECK(l.expire(1000000, 1000) == 0);
  CHECK(l.size() == 1);
  CHECK(l.in_use("t") == 1);
}

TEST_CASE("two streams of one operation: it is detached only when both left", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 0));
  l.adopt("op", "t", 0);
  l.attach("op");
  l.detach("op", 10);
  CHECK(l.expire(1000000, 1) == 0);
  l.detach("op", 20);
  CHECK(l.expire(1000000, 1) == 1);
}

TEST_CASE("a waiting operation holds no slot and its reattach learns that it waits", "[executions]") {
  execution_ledger l;
  l.adopt_waiting("bus", "t", 100);
  CHECK(l.in_use("t") == 0);
  CHECK(l.try_take("t", 1));  // a computing execution still gets the tenant's one slot
  l.detach("bus", 2000);      // the server cut the listener's stream
  auto a = l.attach("bus");
  REQUIRE(a);
  CHECK(a->waiting);
  CHECK(a->started == 100);
  CHECK_FALSE(a->killed);
  l.finish("bus");
  CHECK(l.in_use("t") == 1);  // the computing one's slot is untouched
  CHECK_FALSE(l.attach("bus"));
}

TEST_CASE("an operation known as computing stays so when an ExecutePlan says it waits", "[executions]") {
  execution_ledger l;
  REQUIRE(l.try_take("t", 1));
  l.adopt("op", "t", 10);
  l.adopt_waiting("op", "t", 20);
  auto a = l.attach("op");
  REQUIRE(a);
  CHECK_FALSE(a->waiting);
  CHECK(a->started == 10);
  CHECK(l.in_use("t") == 1);
  l.finish("op");
  CHECK(l.in_use("t") == 0);
}

TEST_CASE("a detached waiting operation expires like any other, freeing nothing", "[executions]") {
  execution_ledger l;
  l.adopt_waiting("bus", "t", 0);
  l.detach("bus", 50);
  CHECK(l.live_ops(0).size() == 1);
  CHECK(l.expire(50 + 300, 300) == 1);
  CHECK(l.size() == 0);
  CHECK(l.in_use("t") == 0);
}

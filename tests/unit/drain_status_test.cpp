#include "actors/drain_status.hpp"

#include <catch2/catch.hpp>

#include "actors/session_table.hpp"
#include "net/executions.hpp"

using namespace scg::actors;

namespace {

const std::int64_t now = 1'000'000;

peer_report fresh(const std::string& node, activity a) { return {node, true, a, now - 1000}; }

}  // namespace

TEST_CASE("a backend that is not drained is serving whatever runs on it", "[drain]") {
  auto s = decide(false, activity{3, 2, 1, now}, {}, now);
  CHECK(s.state == drain_state::serving);
  CHECK(s.total.live_operations == 3);
}

TEST_CASE("a drained backend is idle only when nothing holds it on this replica", "[drain]") {
  CHECK(decide(true, activity{}, {}, now).state == drain_state::idle);
  CHECK(decide(true, activity{1, 0, 0, now}, {}, now).state == drain_state::draining);
  CHECK(decide(true, activity{0, 1, 0, now}, {}, now).state == drain_state::draining);
  CHECK(decide(true, activity{0, 0, 1, now}, {}, now).state == drain_state::draining);
  // An old last activity alone does not hold it: quiet sessions are not counted.
  CHECK(decide(true, activity{0, 0, 0, now - 3'600'000}, {}, now).state == drain_state::idle);
}

TEST_CASE("operations and sessions served through peer replicas hold a drained backend", "[drain]") {
  auto s = decide(true, activity{}, {fresh("scg-1", {2, 0, 0, now - 10}), fresh("scg-2", {0, 1, 0, now - 500})}, now);
  CHECK(s.state == drain_state::draining);
  CHECK(s.total.live_operations == 2);
  CHECK(s.total.active_sessions == 1);
  CHECK(s.total.last_activity_wall_ms == now - 10);
  CHECK(holders(s) == "2 live operations, 1 active session");
  CHECK(decide(true, activity{}, {fresh("scg-1", {}), fresh("scg-2", {})}, now).state == drain_state::idle);
}

TEST_CASE("an up peer that has not reported, or reported long ago, keeps the backend draining", "[drain]") {
  auto missing = decide(true, activity{}, {{"scg-1", true, std::nullopt, 0}}, now);
  CHECK(missing.state == drain_state::draining);
  CHECK(missing.waiting_for == std::vector<std::string>{"scg-1"});
  CHECK(holders(missing) == "waiting for the report of scg-1");
  auto stale = decide(true, activity{}, {{"scg-1", true, activity{}, now - activity_stale_ms - 1}}, now);
  CHECK(stale.state == drain_state::draining);
  // A peer that is down is left out: its clients reach other replicas now.
  auto down = decide(true, activity{}, {{"scg-1", false, activity{5, 5, 5, now}, now}}, now);
  CHECK(down.state == drain_state::idle);
  CHECK(down.total.live_operations == 0);
}

TEST_CASE("an activity report reads back as written and a malformed one is refused", "[drain]") {
  activity a{4, 7, 1, 1733000000123};
  CHECK(encode_activity(a) == "ops=4 sessions=7 calls=1 last=1733000000123");
  CHECK(decode_activity(encode_activity(a)) == a);
  CHECK_FALSE(decode_activity("ops=4 sessions=7"));
  CHECK_FALSE(decode_activity("ops=4 sessions=7 calls=1 last=5 more"));
  CHECK_FALSE(decode_activity("healthy"));
}

TEST_CASE("an activity key names its replica and backend, even a backend name with a slash", "[drain]") {
  auto key = activity_key("scg-0", "pool@10.0.0.1:15002/x");
  REQUIRE(key.rfind("a/", 0) == 0);
  auto parts = parse_activity_id(key.substr(2));
  REQUIRE(parts);
  CHECK(parts->first == "scg-0");
  CHECK(parts->second == "pool@10.0.0.1:15002/x");
  CHECK_FALSE(parse_activity_id("no-separator"));
  CHECK_FALSE(parse_activity_id("\nbackend"));
}

TEST_CASE("the session table counts a backend's sessions used here within the window", "[drain]") {
  session_table t{4};
  t.bind_session("k1", 1, 1000);
  t.bind_session("k2", 1, 5000);
  t.bind_session("k3", 2, 9000);
  t.set_session("k4", 1, 0);  // learned from a peer: the peer reports it
  auto [n, newest] = t.recent_sessions(1, 4000);
  CHECK(n == 1);
  CHECK(newest == 5000);
  CHECK(t.recent_sessions(1, 0).first == 2);
  CHECK(t.recent_sessions(3, 0).first == 0);
  t.add_op("op", 2, "k3", 9000);
  CHECK(t.op_backend("op") == backend_index{2});
  CHECK_FALSE(t.op_backend("other"));
}

TEST_CASE("the ledger's live operations are the attached ones and those detached within the window", "[drain]") {
  scg::net::execution_ledger l;
  for (const char* op : {"attached", "detached-recently", "detached-long-ago", "killed"}) {
    REQUIRE(l.try_take("t", 0));
    l.adopt(op, "t", 100);
  }
  l.detach("detached-recently", 9000);
  l.detach("detached-long-ago", 1000);
  l.kill("killed", 9000);
  auto live = l.live_ops(5000);
  std::sort(live.begin(), live.end());
  CHECK(live == std::vector<std::string>{"attached", "detached-recently"});
  l.finish("attached");
  CHECK(l.live_ops(5000) == std::vector<std::string>{"detached-recently"});
}

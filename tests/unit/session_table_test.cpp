#include <catch2/catch.hpp>

#include "actors/holder_search.hpp"
#include "core/ids.hpp"

#include <thread>

#include "actors/session_table.hpp"

using scg::actors::session_key;
using scg::actors::session_table;

TEST_CASE("session keys of different parts never collide", "[table]") {
  session_key a{"t", "a\x1f" "b", "c"};
  session_key b{"t", "a", "b\x1f" "c"};
  session_key c{"", "ab", "c"};
  session_key d{"", "a", "bc"};
  CHECK(a.str() != b.str());
  CHECK(c.str() != d.str());
  CHECK(session_key{"t", "u", "s"}.str() == session_key{"t", "u", "s"}.str());
}

TEST_CASE("the first binding of a session wins and is counted per backend", "[table]") {
  session_table t{3};
  CHECK_FALSE(t.find_session("k", 0));
  CHECK(t.bind_session("k", 2, 10) == 2);
  CHECK(t.bind_session("k", 1, 20) == 2);
  CHECK(t.find_session("k", 30) == 2u);
  CHECK(t.session_last_seen("k") == 30);
  CHECK(t.session_count() == 1);
  CHECK(t.sessions_per_backend(SIZE_MAX) == std::vector<std::size_t>{0, 0, 1});
  CHECK(t.erase_session("k"));
  CHECK_FALSE(t.erase_session("k"));
  CHECK(t.session_count() == 0);
  CHECK(t.sessions_per_backend(SIZE_MAX) == std::vector<std::size_t>{0, 0, 0});
}

TEST_CASE("operations follow their first backend and expire when unseen", "[table]") {
  session_table t{2};
  CHECK(t.add_op("op1", 1, "s", 0) == 1);
  CHECK(t.add_op("op1", 0, "other", 500) == 1);  // first writer keeps the op
  auto e = t.find_op("op1", 900);
  REQUIRE(e);
  CHECK(e->backend == 1);
  CHECK(e->session == "s");
  t.add_op("op2", 0, "s", 0);
  CHECK(t.expire_ops(1000, 1000) == 1);  // op2 unseen for 1000 ms, op1 seen at 900
  CHECK(t.has_op("op1"));
  CHECK_FALSE(t.has_op("op2"));
  CHECK(t.op_count() == 1);
  // In a cluster, an operation learned from a peer (never used here) waits for its tombstone.
  t.add_op("learned", 0, "s", 0);
  CHECK(t.expire_ops(5000, 1000, true) == 1);  // op1 goes, learned stays
  CHECK(t.has_op("learned"));
  CHECK(t.erase_op("learned"));
  t.add_op("op1", 1, "s", 900);
  CHECK(t.op_count() == 1);
  CHECK(t.erase_op("op1"));
  CHECK(t.op_count() == 0);
  // A start, once known, stays; an entry without one learns it.
  t.add_op("op3", 0, "s", 10, 777);
  t.add_op("op3", 0, "s", 20, 0);
  CHECK(t.find_op("op3", 30)->started_wall_ms == 777);
  t.add_op("op4", 0, "s", 10);
  t.add_op("op4", 0, "s", 20, 888);
  CHECK(t.find_op("op4", 30)->started_wall_ms == 888);
}

TEST_CASE("concurrent binders of one session all see one backend", "[table]") {
  session_table t{4};
  std::vector<std::thread> threads;
  std::vector<std::uint32_t> seen(8);
  for (std::uint32_t i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { seen[i] = t.bind_session("same", i % 4, i); });
  for (auto& th : threads) th.join();
  for (auto b : seen) CHECK(b == seen[0]);
  CHECK(t.session_count() == 1);
}

TEST_CASE("a replicated decision overrides a local binding and moves the count", "[table]") {
  session_table t{2};
  t.bind_session("k", 0, 0);
  t.set_session("k", 1, 5);
  CHECK(t.find_session("k", 6) == 1u);
  CHECK(t.sessions_per_backend(SIZE_MAX) == std::vector<std::size_t>{0, 1});
  t.set_session("new", 0, 7);
  CHECK(t.session_count() == 2);
  CHECK(t.sessions_per_backend(SIZE_MAX) == std::vector<std::size_t>{1, 1});
}

TEST_CASE("a local decision that won rebinds a session an older merge moved, never one released", "[table]") {
  // The router bound "k" to 0; a peer's older entry, merged before the
  // router's write reached the cluster actor, moved it to 1.
  session_table t{2};
  t.bind_session("k", 0, 42);
  t.set_session("k", 1, 0);
  CHECK(t.session_backend("k") == 1u);
  CHECK(t.rebind_if_bound("k", 0));
  CHECK(t.session_backend("k") == 0u);
  CHECK(t.session_last_seen("k") == 42);  // its last use stays, session_backend did not refresh it
  CHECK(t.sessions_per_backend(SIZE_MAX) == std::vector<std::size_t>{1, 0});
  CHECK_FALSE(t.rebind_if_bound("k", 0));  // already there
  // Released meanwhile: the write that arrives late binds nothing again.
  REQUIRE(t.erase_session("k"));
  CHECK_FALSE(t.rebind_if_bound("k", 1));
  CHECK_FALSE(t.session_last_seen("k"));
  CHECK_FALSE(t.session_backend("k"));
  CHECK(t.session_count() == 0);
}

TEST_CASE("a server's answer to a holder search says whether it holds the session", "[holder]") {
  using namespace scg::actors;
  CHECK(classify_holder_answer(13, "[INVALID_HANDLE.OPERATION_NOT_FOUND] The operation ...") == holder_answer::holds);
  CHECK(classify_holder_answer(13, "[INVALID_HANDLE.SESSION_NOT_FOUND] The handle ...") == holder_answer::not_here);
  CHECK(classify_holder_answer(13, "[INVALID_HANDLE.SESSION_CHANGED] The existing Spark ...") ==
        holder_answer::not_here);
  CHECK(classify_holder_answer(14, "[INVALID_HANDLE.OPERATION_NOT_FOUND]") == holder_answer::unknown);
  CHECK(classify_holder_answer(13, "something else") == holder_answer::unknown);
  const auto req = holder_request({"s-1", "bob", "srv-9"}, "op-1");
  CHECK(req == std::string("\x0a\x03s-1\x12\x05\x0a\x03" "bob\x1a\x04op-1\x32\x05srv-9"));
  const auto id = scg::core::new_uuid();
  REQUIRE(id.size() == 36);
  CHECK(id[8] == '-');
  CHECK(id[14] == '4');
  CHECK(std::string("89ab").find(id[19]) != std::string::npos);
}

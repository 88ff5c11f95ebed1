// The emulator's session and operation rules, which follow Spark's
// (tests/realspark/conformance.py compares them with a real server).
#include <catch2/catch.hpp>

#include <thread>

#include "tools/fake_spark/fake_state.hpp"

using namespace scg::fake;

namespace {

const std::string session_a = "5f0c6a3e-2b1d-4c8e-9a7f-1e2d3c4b5a69";
const std::string op_a = "0b9e4f62-7c1a-4d3b-8e5f-6a7b8c9d0e1f";
const std::string op_b = "c3d2e1f0-a9b8-4c7d-8e6f-5a4b3c2d1e0f";

result_shape shape(bool reattachable, int64_t responses = 2) {
  result_shape s;
  s.responses = responses;
  s.reattachable = reattachable;
  return s;
}

std::string error_class(const maybe_error& e) { return e ? e->error_class : "OK"; }

}  // namespace

TEST_CASE("ids pass the fake only in java.util.UUID's format", "[fake_state]") {
  CHECK(is_uuid(session_a));
  CHECK(is_uuid("1-2-3-4-5"));  // UUID.fromString is lenient about group lengths
  CHECK_FALSE(is_uuid("kill-0"));
  CHECK_FALSE(is_uuid("op-survives-kill"));
  CHECK_FALSE(is_uuid(""));
  CHECK_FALSE(is_uuid("1-2-3-4-5-6"));
  CHECK_FALSE(is_uuid("1--3-4-5"));
  CHECK_FALSE(is_uuid(session_a + "0"));
  CHECK_FALSE(is_uuid("g0c6a3e-2b1d-4c8e-9a7f-1e2d3c4b5a69"));
}

TEST_CASE("a session id that is not a UUID is refused with INVALID_HANDLE.FORMAT", "[fake_state]") {
  fake_state state("a");
  auto e = state.with_session({"u", "kill-0"}, std::nullopt, true, [](session_state&) { return maybe_error{}; });
  CHECK(error_class(e) == "INVALID_HANDLE.FORMAT");
  CHECK(e->sql_state == "HY000");
  CHECK(state.stats()["sessions_live"] == 0);
}

TEST_CASE("an operation id that is not a UUID is refused with INVALID_HANDLE.FORMAT", "[fake_state]") {
  session_state session;
  stream_cursor cursor;
  CHECK(error_class(session.start("op-1", {}, shape(true), cursor)) == "INVALID_HANDLE.FORMAT");
  CHECK(session.ops.empty());
}

TEST_CASE("a non-reattachable execution is never cut, has no result_complete and ends with its stream",
          "[fake_state]") {
  session_state session;
  stream_cursor cursor;
  auto s = shape(false, 3);
  s.stream_max = 1;
  REQUIRE_FALSE(session.start(op_a, {}, s, cursor));
  CHECK(cursor.shape.stream_max == 0);
  CHECK(cursor.shape.total() == 3);  // three batches, no result_complete
  stream_cursor again;
  CHECK(error_class(session.attach(op_a, std::nullopt, again)) == "INVALID_CURSOR.NOT_REATTACHABLE");
  session.stream_ended(op_a, cursor.stream, 0);
  CHECK(error_class(session.attach(op_a, std::nullopt, again)) == "INVALID_HANDLE.OPERATION_NOT_FOUND");
}

TEST_CASE("a reattachable execution ends with result_complete and waits detached for its reattach",
          "[fake_state]") {
  session_state session;
  stream_cursor cursor;
  REQUIRE_FALSE(session.start(op_a, {}, shape(true, 3), cursor));
  CHECK(cursor.shape.total() == 4);
  session.stream_ended(op_a, cursor.stream, 1000);
  stream_cursor again;
  REQUIRE_FALSE(session.attach(op_a, response_id(op_a, 1), again));
  CHECK(again.first_index == 2);
  CHECK(again.stream == cursor.stream + 1);
}

TEST_CASE("after release_all an operation is not found, and its id cannot start another", "[fake_state]") {
  session_state session;
  stream_cursor cursor;
  REQUIRE_FALSE(session.start(op_a, {}, shape(true), cursor));
  CHECK(error_class(session.start(op_a, {}, shape(true), cursor)) == "INVALID_HANDLE.OPERATION_ALREADY_EXISTS");
  session.release(op_a, true, std::nullopt);
  CHECK(error_class(session.attach(op_a, std::nullopt, cursor)) == "INVALID_HANDLE.OPERATION_NOT_FOUND");
  CHECK(error_class(session.start(op_a, {}, shape(true), cursor)) == "INVALID_HANDLE.OPERATION_ABANDONED");
}

TEST_CASE("an operation detached past the limit is reaped and then abandoned", "[fake_state]") {
  session_state session;
  stream_cursor cursor;
  REQUIRE_FALSE(session.start(op_a, {}, shape(true), cursor));
  REQUIRE_FALSE(session.start(op_b, {}, shape(true), cursor));
  session.stream_ended(op_a, 1, 1000);
  session.reap(1000 + 499, 500);
  CHECK(session.ops.count(op_a) == 1);
  session.reap(1000 + 500, 500);
  CHECK(session.ops.count(op_a) == 0);
  CHECK(session.ops.count(op_b) == 1);  // still streaming: never reaped
  CHECK(error_class(session.attach(op_a, std::nullopt, cursor)) == "INVALID_HANDLE.OPERATION_ABANDONED");
}

TEST_CASE("a released session stays closed, unless the client allowed a reconnect", "[fake_state]") {
  fake_state state("a");
  auto touch = [&](bool create) {
    return state.with_session({"u", session_a}, std::nullopt, create, [](session_state&) { return maybe_error{}; });
  };
  REQUIRE_FALSE(touch(true));
  REQUIRE(state.remove_session({"u", session_a}, false));
  CHECK(error_class(touch(true)) == "INVALID_HANDLE.SESSION_CLOSED");
  CHECK(error_class(touch(false)) == "INVALID_HANDLE.SESSION_CLOSED");

  fake_state other("b");
  REQUIRE_FALSE(other.with_session({"u", session_a}, std::nullopt, true, [](session_state&) { return maybe_error{}; }));
  REQUIRE(other.remove_session({"u", session_a}, true));
  CHECK_FALSE(other.with_session({"u", session_a}, std::nullopt, true, [](session_state&) { return maybe_error{}; }));
}

TEST_CASE("CloneSession needs its parent, and a target that is new and a UUID", "[fake_state]") {
  fake_state state("a");
  std::string ids[2];
  CHECK(error_class(state.clone_session({"u", session_a}, std::nullopt, op_a, ids[0], ids[1])) ==
        "INVALID_HANDLE.SESSION_NOT_FOUND");
  REQUIRE_FALSE(state.with_session({"u", session_a}, std::nullopt, true, [](session_state&) { return maybe_error{}; }));
  CHECK(error_class(state.clone_session({"u", session_a}, std::nullopt, "clone-1", ids[0], ids[1])) ==
        "INVALID_CLONE_SESSION_REQUEST.TARGET_SESSION_ID_FORMAT");
  CHECK(error_class(state.clone_session({"u", session_a}, std::nullopt, session_a, ids[0], ids[1])) ==
        "INVALID_CLONE_SESSION_REQUEST.TARGET_SESSION_ID_ALREADY_EXISTS");
  CHECK_FALSE(state.clone_session({"u", session_a}, std::nullopt, op_a, ids[0], ids[1]));
  CHECK(ids[1] != ids[0]);
}

TEST_CASE("an idle session expires and is then closed", "[fake_state]") {
  fake_state state("a", {/*session_idle_ms=*/0, /*detached_op_ms=*/0});
  REQUIRE_FALSE(state.with_session({"u", session_a}, std::nullopt, true, [](session_state&) { return maybe_error{}; }));
  // The sweep runs at most every 100 ms.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (state.stats()["sessions_expired"] == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(state.stats()["sessions_expired"] == 1);
  CHECK(error_class(state.with_session({"u", session_a}, std::nullopt, true,
                                       [](session_state&) { return maybe_error{}; })) ==
        "INVALID_HANDLE.SESSION_CLOSED");
}

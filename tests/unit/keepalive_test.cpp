#include "net/h2/keepalive.hpp"

#include <catch2/catch.hpp>

using namespace scg::net::h2;
using namespace std::chrono_literals;

namespace {
steady_time at(std::chrono::milliseconds ms) { return steady_time{} + 1000h + ms; }
}  // namespace

TEST_CASE("keepalive: a quiet client connection is PINGed, and closed when nothing answers", "[unit][keepalive]") {
  keepalive_policy p{10s, 8s, false};
  keepalive_state s;
  s.on_read(at(0ms));
  CHECK(keepalive_step(s, p, at(9999ms), false) == keepalive_action::none);
  CHECK(keepalive_step(s, p, at(10s), false) == keepalive_action::ping);  // no calls needed toward a client
  CHECK(keepalive_step(s, p, at(17s), false) == keepalive_action::none);  // waiting for the answer
  CHECK(keepalive_step(s, p, at(18s), false) == keepalive_action::close);
}

TEST_CASE("keepalive: any bytes after the PING answer it, and the next waits a whole interval", "[unit][keepalive]") {
  keepalive_policy p{10s, 8s, false};
  keepalive_state s;
  s.on_read(at(0ms));
  REQUIRE(keepalive_step(s, p, at(10s), false) == keepalive_action::ping);
  s.on_read(at(10100ms));  // the ACK
  CHECK(keepalive_step(s, p, at(19s), false) == keepalive_action::none);
  CHECK_FALSE(s.ping_outstanding);
  CHECK(keepalive_step(s, p, at(20100ms), false) == keepalive_action::ping);
}

TEST_CASE("keepalive: toward a backend, PINGs only while calls are open", "[unit][keepalive]") {
  keepalive_policy p{10s, 8s, true};
  keepalive_state s;
  s.on_read(at(0ms));
  CHECK(keepalive_step(s, p, at(60s), false) == keepalive_action::none);
  CHECK(keepalive_step(s, p, at(61s), true) == keepalive_action::ping);
}

TEST_CASE("keepalive: toward a backend, at most 2 PINGs between its frames, then one per 5.5 minutes",
          "[unit][keepalive]") {
  keepalive_policy p{10s, 8s, true};
  keepalive_state s;
  s.on_read(at(0ms));
  auto t = 0ms;
  int pings = 0;
  // A quiet call for 10 minutes, every PING answered at once.
  for (int i = 0; i < 1200; ++i, t += 500ms) {
    if (keepalive_step(s, p, at(t), true) == keepalive_action::ping) {
      ++pings;
      s.on_read(at(t + 1ms));
    }
  }
  // 2 free (10 s apart), then one more 330 s after the second: grpc-java allows that.
  CHECK(pings == 3);
  // A HEADERS or DATA frame from the server makes PINGs free again.
  s.on_server_frame();
  s.on_read(at(t));
  t += 10s;
  CHECK(keepalive_step(s, p, at(t), true) == keepalive_action::ping);
}

TEST_CASE("keepalive: interval 0 turns it off", "[unit][keepalive]") {
  keepalive_policy p{0ms, 8s, false};
  keepalive_state s;
  CHECK(keepalive_step(s, p, at(3600s), true) == keepalive_action::none);
}

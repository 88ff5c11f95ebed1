#pragma once
// When a connection sends a keepalive PING, and when it gives up on its peer:
// pure logic, stepped by the worker's tick (tests/unit/keepalive_test.cpp).
//
// A connection that received nothing for `interval` sends a PING; any bytes
// that arrive afterwards answer it; none within `timeout` and the connection
// is closed. Toward a backend, scg PINGs only while calls are open, and
// within the policy gRPC servers enforce. grpc-java (Spark's server): a PING
// sooner than the permitted interval (5 minutes by default, 10 s in Spark
// 4.3) after the last valid one, or after the connection opened, is a
// strike; the third strike closes the connection with every call on it
// (too_many_pings); the count starts over when the server sends HEADERS or
// DATA. gRPC core is laxer. So: at most 2 PINGs between two such frames,
// then one per 5.5 minutes (measured against Spark 4.3: the realspark
// scenario quiet_stream; 3 PINGs on a young connection got it closed).

#include <chrono>

namespace scg::net::h2 {

using steady_time = std::chrono::steady_clock::time_point;

struct keepalive_policy {
  std::chrono::milliseconds interval{10000};  ///< quiet this long: PING (0: never)
  std::chrono::milliseconds timeout{8000};    ///< PING unanswered this long: close
  bool toward_server = false;                 ///< the peer is a gRPC server (a backend)
};

/// Free PINGs a gRPC server allows between two of its HEADERS/DATA frames,
/// and the spacing after them.
inline constexpr int server_free_pings = 2;
inline constexpr std::chrono::seconds server_ping_spacing{330};

struct keepalive_state {
  steady_time last_read{};          ///< when bytes last arrived
  steady_time ping_sent{};          ///< the last PING
  bool ping_outstanding = false;
  int pings_since_data = 0;         ///< PINGs since the server last sent HEADERS/DATA

  void on_read(steady_time now) { last_read = now; }
  void on_server_frame() { pings_since_data = 0; }
};

enum class keepalive_action { none, ping, close };

/// What the connection does now; `has_calls`: streams are open on it.
inline keepalive_action keepalive_step(keepalive_state& s, const keepalive_policy& p, steady_time now,
                                       bool has_calls) {
  if (p.interval.count() <= 0) return keepalive_action::none;
  if (s.ping_outstanding) {
    if (s.last_read > s.ping_sent) {
      s.ping_outstanding = false;  // answered (by its ACK or anything else)
    } else {
      return now - s.ping_sent >= p.timeout ? keepalive_action::close : keepalive_action::none;
    }
  }
  if (now - s.last_read < p.interval) return keepalive_action::none;
  if (p.toward_server) {
    if (!has_calls) return keepalive_action::none;
    if (s.pings_since_data >= server_free_pings && now - s.ping_sent < server_ping_spacing)
      return keepalive_action::none;
  }
  s.ping_outstanding = true;
  s.ping_sent = now;
  ++s.pings_since_data;
  return keepalive_action::ping;
}

}  // namespace scg::net::h2

#pragma once
// The admin plane's HTTP server: cpp-httplib's parser and router, with
// connections bounded the way cpp-httplib 0.11 alone does not: a thread per
// open connection, started on demand up to admin.max_connections (more are
// closed at accept), a connection without a request for
// admin.idle_timeout_ms closed, and a request's head and body read within
// admin.request_timeout_ms of its first byte (a slowloris is cut). An idle
// or slow connection holds only its own thread, never a probe's.

#include <httplib.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "admin/admin_access.hpp"

namespace scg::admin {

/// The bounds of one listener (from config::admin_plane).
struct listener_limits {
  int max_connections = 512;
  int idle_timeout_ms = 5000;
  int request_timeout_ms = 5000;  ///< also bounds writing a response
  int max_requests_per_connection = 100;
};

/// What one listener counts (scg_admin_* series, label listener).
struct listener_stats {
  std::atomic<std::int64_t> open{0};
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> idle_closed{0};
  std::atomic<std::uint64_t> request_timeouts{0};
};

/// The admin plane's counters, process-wide (rendered by metrics_text).
struct admin_counters {
  listener_stats admin;  ///< admin_addr
  listener_stats probe;  ///< admin.probe_addr
  std::array<std::atomic<std::uint64_t>, deny_reason_count> denied{};  ///< by deny_reason
  std::atomic<std::uint64_t> shed{0};  ///< heavy requests answered 503 at admin.max_heavy_requests
  std::atomic<std::uint64_t> token_reloads{0};
  std::atomic<std::uint64_t> token_reload_failures{0};
};
admin_counters& global_admin_counters();

/// Holds `gate` for the request this thread is serving; the connection
/// loop gives it back once the response is out (or the request failed).
void hold_for_request(request_gate& gate);

/// An httplib::Server with bounded connections (see the top of this file).
class bounded_server : public httplib::Server {
 public:
  bounded_server(listener_limits limits, listener_stats& stats);
  ~bounded_server() override;

  /// Binds host:port (0: any free port) with a backlog of max_connections;
  /// the port, or -1 when it cannot.
  int bind(const std::string& host, int port);

  /// Stops accepting and wakes every connection thread, so listen_after_bind()
  /// returns promptly.
  void halt();

 private:
  bool process_and_close_socket(socket_t sock) override;
  /// 1 when `sock` has bytes (or hung up), 0 after `ms` without, -1 when halted.
  int wait_for_request(socket_t sock, int ms) const;

  listener_limits limits_;
  listener_stats& stats_;
  int wake_[2] = {-1, -1};  ///< a pipe: its read end turns readable at halt()
};

}  // namespace scg::admin

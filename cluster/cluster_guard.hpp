#pragma once
// The cluster port without TLS: a relay in front of CAF. It listens where
// cluster.bind_addr says, passes each connection on to CAF's listener on a
// loopback port, and checks every frame the dialer sends (frame_check.hpp)
// before CAF reads it: a connection whose frame would crash CAF, or make it
// reserve more than frame_check::max_payload, is closed, logged
// (`cluster_connection_refused`) and counted (scg_cluster_connections_refused_total),
// and the replica carries on. What CAF sends back passes unchecked. With
// cluster.tls, CAF listens itself: only holders of a certificate from the
// cluster's CA reach it. One thread; each relayed connection holds two
// 64 KiB buffers. At most 256 connections at once, and 8 from one address
// awaiting their handshake: a flood from one source leaves room for the others.
//
// CAF hears of a connection only once its dialer's handshake has arrived
// whole (a CAF dialer sends it at once, without waiting for the server's).
// Reachability probes, scans and connections that never send a handshake
// (closed after cluster.connection_timeout_ms, and counted as refused) so
// never reach CAF. Beyond the load, that keeps a hazard read in CAF 0.17.6's
// source (not seen to happen) away: CAF names a connection by its socket's
// number and forgets a closed one only once its BASP worker has handled
// every message received before the close. A connection accepted meanwhile
// on the same number would lose its routing entry and its parsing state to
// that clean-up. Each probe of the port was such an accept and close.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace scg::cluster {

class cluster_guard {
 public:
  /// Listens on `bind_addr` ("host:port", as cluster.bind_addr; port 0: a
  /// free one) and relays to 127.0.0.1:`inner_port`; a dialer whose
  /// handshake has not arrived after `handshake_timeout` is closed. nullptr
  /// with `error` set when it cannot listen.
  static std::unique_ptr<cluster_guard> start(const std::string& bind_addr, std::uint16_t inner_port,
                                              std::chrono::milliseconds handshake_timeout, std::string& error);
  ~cluster_guard();  // stops listening and closes every relayed connection
  cluster_guard(const cluster_guard&) = delete;
  cluster_guard& operator=(const cluster_guard&) = delete;

  /// The port it listens on.
  std::uint16_t port() const;

  struct impl;

 private:
  explicit cluster_guard(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace scg::cluster

#pragma once
// The front door: the HTTP/2 server on bind_addr (plaintext, TLS or mutual
// TLS) whose worker threads take every client connection and hand each
// request stream to the forwarder.

#include <chrono>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "net/forwarder.hpp"

namespace scg::net {

/// The client connections a replica takes at once: `configured`, or when
/// 0, the open-file limit less what backends, ports and files need.
std::size_t client_connection_cap(std::size_t configured);

class front_door {
 public:
  /// Listens on cfg.bind_addr with one worker per core; throws
  /// std::runtime_error naming the address when it cannot bind (start-up
  /// only, never on the data path).
  front_door(const config::gateway& cfg, forward_context& fx);
  ~front_door();

  /// The port actually bound (differs from the config when it asked for 0).
  int port() const { return port_; }

  /// Stops taking connections, tells clients to open no new streams, lets
  /// calls in flight run until `deadline`, then ends the rest with
  /// UNAVAILABLE; returns when all are done.
  void shutdown(std::chrono::system_clock::time_point deadline);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  int port_ = 0;
};

}  // namespace scg::net

#pragma once
// The front door: the gRPC server that takes every call on bind_addr and
// hands it to the forwarder.

#include <chrono>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "net/forwarder.hpp"

namespace grpc {
class Server;
}

namespace scg::net {

class front_door {
 public:
  /// Listens on cfg.bind_addr; throws std::runtime_error naming the address
  /// when it cannot bind (start-up only, never on the data path).
  front_door(const config::gateway& cfg, forward_context& fx);
  ~front_door();

  /// The port actually bound (differs from the config when it asked for 0).
  int port() const { return port_; }

  /// Stops taking calls, lets calls in flight run until `deadline`, then
  /// cancels the rest; returns when all are done.
  void shutdown(std::chrono::system_clock::time_point deadline);

 private:
  struct service;
  std::unique_ptr<service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace scg::net

#pragma once
// scg-fake-spark's HTTP side: the part of Spark's UI REST API that scg's load
// poller reads, and /fake/* endpoints through which tests steer and observe it.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace scg::fake {

/// Serves the UI API on its own thread between start() and stop().
class ui_api {
 public:
  /// `stats` answers GET /fake/stats; it is called from HTTP threads.
  ui_api(std::string name, std::function<nlohmann::json()> stats);
  ~ui_api();

  /// Binds host:port (port 0 picks a free one) and serves; returns the port, 0 on failure.
  int start(const std::string& host, int port);
  /// Stops serving and joins the thread; idempotent.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace scg::fake

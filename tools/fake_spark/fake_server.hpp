#pragma once
// scg-fake-spark's gRPC side: an emulated SparkConnectService, plus an echo
// service answering every method it does not declare.

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace scg::fake {

/// Command-line settings. The stream settings are defaults that a request can
/// override with x-fake-* headers (see README.md).
struct options {
  std::string listen = "127.0.0.1:0";
  std::string name;
  std::string ui_listen;  // empty: no UI REST API
  std::string port_file;
  int64_t stream_max_responses = 0;
  int64_t responses = 3;
  int64_t payload_bytes = 64;
  int64_t rows_per_batch = 1;
  int64_t metrics = 0;  // 1: a metrics response before result_complete
  int64_t delay_ms = 0;
  int64_t max_message_bytes = int64_t{256} << 20;
  int64_t session_timeout_ms = 60 * 60 * 1000;  // Spark's defaultSessionTimeout
  int64_t detached_timeout_ms = 5 * 60 * 1000;  // Spark's execute.manager.detachedTimeout
  std::string token;  // non-empty: calls need "authorization: Bearer TOKEN"
  // "KEY=VALUE" added to every Config answer. Real Spark (4.0, 4.3) never
  // shows its authentication token there; this emulates a server that would,
  // so scg's redaction stays tested.
  std::string config_echo;
};

/// The emulator's gRPC server; its state lives as long as the object.
class fake_server {
 public:
  explicit fake_server(options opts);
  ~fake_server();

  /// Binds opts.listen and starts serving; returns the bound port, 0 if binding failed.
  int start();
  /// Refuses new calls and cancels the remaining ones after `grace`; idempotent.
  void shutdown(std::chrono::milliseconds grace);
  /// Counters for GET /fake/stats. Thread-safe.
  nlohmann::json stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace scg::fake

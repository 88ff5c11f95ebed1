#pragma once
// One scg replica: wires config, actors, the front door and the admin
// endpoint together, and runs until SIGTERM or SIGINT.

#include <optional>
#include <string>

#include "config/config.hpp"

namespace scg::app {

/// Sets up the named loggers (forward, router, backend, admin, main) at `level`.
void setup_logging(const std::string& level, const std::string& format = "json");

/// Reads what the configuration names but does not contain (JWT key files,
/// HMAC and backend token secrets); the first problem, naming its field.
std::optional<config::error> check_secrets(const config::gateway& cfg);

/// Runs a replica. SIGTERM/SIGINT/SIGHUP must already be blocked in every
/// thread (main does it first). SIGHUP reloads the backends list from
/// `config_path`. When `port_file` is not empty, writes
/// {"grpc": PORT, "admin": PORT, "cluster": PORT} there once listening.
/// Returns the exit code.
int run_gateway(const config::gateway& cfg, const std::string& config_path, const std::string& port_file);

}  // namespace scg::app

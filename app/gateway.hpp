#pragma once
// One scg replica: wires config, actors, the front door and the admin
// endpoint together, and runs until SIGTERM or SIGINT.

#include <string>

#include "config/config.hpp"

namespace scg::app {

/// Sets up the named loggers (forward, router, backend, admin, main) at `level`.
void setup_logging(const std::string& level);

/// Runs a replica. SIGTERM/SIGINT/SIGHUP must already be blocked in every
/// thread (main does it first). SIGHUP reloads the backends list from
/// `config_path`. When `port_file` is not empty, writes
/// {"grpc": PORT, "admin": PORT, "cluster": PORT} there once listening.
/// Returns the exit code.
int run_gateway(const config::gateway& cfg, const std::string& config_path, const std::string& port_file);

}  // namespace scg::app

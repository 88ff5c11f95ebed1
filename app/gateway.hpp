#pragma once
// One scg replica: wires config, actors, the front door and the admin
// endpoint together, and runs until SIGTERM or SIGINT.

#include <memory>
#include <string>

#include "auth/admin_auth.hpp"
#include "auth/authenticator.hpp"
#include "auth/credentials.hpp"
#include "config/config.hpp"

namespace scg::app {

/// Sets up the named loggers (forward, router, backend, admin, main) at
/// `cfg.level`, writing `cfg.format`.
void setup_logging(const config::logging& cfg);

/// What the configuration names but does not contain, read at start: JWT
/// key files, HMAC and backend token secrets, the admin token files.
struct secrets {
  std::unique_ptr<auth::authenticator> authenticator;
  auth::backend_credentials backend_tokens;
  std::unique_ptr<auth::admin_tokens> admin_tokens;  ///< read again later, in place
};

/// Reads them (`scg --check-config` too); the first problem names its field.
config::result<secrets> read_secrets(const config::gateway& cfg);

/// Runs a replica. SIGTERM/SIGINT/SIGHUP must already be blocked in every
/// thread (main does it first). SIGHUP reloads the backends list from
/// `config_path`. When `port_file` is not empty, writes
/// {"grpc": PORT, "admin": PORT, "cluster": PORT} there once listening.
/// Returns the exit code.
int run_gateway(const config::gateway& cfg, const std::string& config_path, const std::string& port_file);

}  // namespace scg::app

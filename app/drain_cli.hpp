#pragma once
// `scg drain [--wait] [--timeout SECS] [--admin URL] [--token-file FILE] [--undrain] BACKEND`:
// drains a backend through a replica's admin API (the drain applies on every
// replica) and, with --wait, polls GET /api/v1/backends/{name} until its
// drain state is idle: no live operation and no session used within
// drain.idle_secs on any replica, so its server is safe to stop. The admin
// token (admin.token_file on the replica) comes from --token-file, else from
// the environment variable SCG_ADMIN_TOKEN; it is sent as a Bearer header.

#include <iosfwd>
#include <string>
#include <variant>
#include <vector>

namespace scg::app {

struct drain_args {
  std::string backend;
  std::string admin = "http://127.0.0.1:9090";  ///< a replica's admin origin
  bool wait = false;
  bool undrain = false;
  int timeout_secs = 600;        ///< --wait gives up after this long
  int interval_ms = 1000;        ///< between two status polls
  std::string token_file;        ///< --token-file: the admin token; empty: $SCG_ADMIN_TOKEN
};

/// The arguments after "drain", or a message naming what is wrong.
std::variant<drain_args, std::string> parse_drain_args(const std::vector<std::string>& args);

/// Runs the command; prints progress to `out`, problems to `err`. Exit codes:
/// 0 done (with --wait: idle, safe to stop), 1 --wait timed out (the line
/// names what still holds the backend), 3 the admin API cannot be reached or
/// refused the request (unknown backend, no or a wrong token, …), or the
/// backend was undrained while waiting.
int run_drain(const drain_args& a, std::ostream& out, std::ostream& err);

/// The usage lines of the drain command.
extern const char* const drain_usage;

}  // namespace scg::app

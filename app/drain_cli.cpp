#include "app/drain_cli.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <thread>

#include "auth/admin_auth.hpp"
#include "core/address.hpp"
#include "core/file.hpp"

namespace scg::app {

const char* const drain_usage =
    "       scg drain [--wait] [--timeout SECS] [--admin URL] [--token-file FILE] [--undrain] BACKEND\n"
    "         (the admin token: --token-file FILE, else $SCG_ADMIN_TOKEN)\n";

namespace {

/// A whole positive number of at most 7 digits.
bool parse_secs(const std::string& text, int& out) {
  if (text.empty() || text.size() > 7 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoi(text);
  return out > 0;
}

/// The backend name as one path segment.
std::string segment(const std::string& name) {
  return core::percent_encode(name, [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '@' || c == ':';
  });
}

/// The "error" of an admin answer, or its body when it has none.
std::string error_of(const httplib::Result& r) {
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  return r->body;
}

}  // namespace

std::variant<drain_args, std::string> parse_drain_args(const std::vector<std::string>& args) {
  drain_args a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    if (arg == "--wait") {
      a.wait = true;
    } else if (arg == "--undrain") {
      a.undrain = true;
    } else if (arg == "--timeout") {
      auto v = value();
      if (!v) return std::string("--timeout needs SECS");
      if (!parse_secs(*v, a.timeout_secs)) return "--timeout: expected a positive number of seconds, got \"" + *v + "\"";
    } else if (arg == "--token-file") {
      auto v = value();
      if (!v || v->empty()) return std::string("--token-file needs FILE");
      a.token_file = *v;
    } else if (arg == "--admin") {
      auto v = value();
      if (!v) return std::string("--admin needs a URL");
      auto u = core::parse_url(*v);
      if (!u || u->scheme != "http")
        return "--admin: expected http://HOST:PORT (a replica's admin_addr), got \"" + *v + "\"";
      a.admin = u->origin();
    } else if (!arg.empty() && arg[0] == '-') {
      return "unknown option " + arg;
    } else if (a.backend.empty()) {
      a.backend = arg;
    } else {
      return "one BACKEND only (got \"" + a.backend + "\" and \"" + arg + "\")";
    }
  }
  if (a.backend.empty()) return std::string("BACKEND is required (a name from GET /api/v1/backends)");
  if (a.wait && a.undrain) return std::string("--wait waits for a drain: not with --undrain");
  return a;
}

int run_drain(const drain_args& a, std::ostream& out, std::ostream& err) {
  std::string token;
  if (!a.token_file.empty()) {
    std::string why;
    auto text = core::read_file(a.token_file, why, 64 * 1024);
    auto tokens = text ? auth::tokens_of_file(*text) : std::vector<std::string>{};
    if (tokens.empty()) {
      err << "scg drain: --token-file: " << (text ? "\"" + a.token_file + "\" holds no token" : why) << "\n";
      return 3;
    }
    token = tokens.front();
  } else if (const char* env = std::getenv("SCG_ADMIN_TOKEN")) {
    token = env;
  }
  httplib::Client client(a.admin);
  if (!token.empty()) client.set_bearer_token_auth(token);
  client.set_connection_timeout(std::chrono::seconds(3));
  client.set_read_timeout(std::chrono::seconds(10));
  const std::string base = "/api/v1/backends/" + segment(a.backend);
  auto unreachable = [&](const httplib::Result& r) {
    err << "scg drain: cannot reach the admin API at " << a.admin << ": " << httplib::to_string(r.error())
        << " (is a replica running there? --admin URL)\n";
    return 3;
  };

  const auto verb = a.undrain ? "undrain" : "drain";
  auto posted = client.Post(base + "/" + verb, "", "application/json");
  if (!posted) return unreachable(posted);
  if (posted->status != 200) {
    err << "scg drain: " << a.admin << " refused the " << verb << " of " << a.backend << " (HTTP "
        << posted->status << "): " << error_of(posted) << "\n";
    if (posted->status == 401 || posted->status == 403)
      err << "scg drain: drains need the replica's admin token: --token-file FILE or SCG_ADMIN_TOKEN\n";
    return 3;
  }
  out << "scg drain: " << a.backend << (a.undrain ? " undrained" : " drained (no new sessions)") << " via "
      << a.admin << "\n";
  if (!a.wait) return 0;

  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::seconds(a.timeout_secs);
  std::string last_holders = "no status yet";
  for (;;) {
    auto r = client.Get(base);
    if (!r) return unreachable(r);
    if (r->status != 200) {
      err << "scg drain: " << a.admin << " answered HTTP " << r->status << " for " << a.backend << ": "
          << error_of(r) << "\n";
      return 3;
    }
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    const auto drain = j.is_object() ? j.value("drain", nlohmann::json::object()) : nlohmann::json::object();
    const auto state = drain.value("state", std::string());
    if (state == "idle") {
      out << "scg drain: " << a.backend << " is idle: no live operations, no session used within "
          << drain.value("idle_secs", 0) << " s on any replica; safe to stop its server\n";
      return 0;
    }
    if (state == "serving") {
      err << "scg drain: " << a.backend << " is no longer drained (undrained meanwhile?)\n";
      return 3;
    }
    last_holders = drain.value("holders", std::string("unknown"));
    if (clock::now() >= until) {
      err << "scg drain: timed out after " << a.timeout_secs << " s; " << a.backend << " is still held by "
          << last_holders << "\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(a.interval_ms));  // the poll interval
  }
}

}  // namespace scg::app

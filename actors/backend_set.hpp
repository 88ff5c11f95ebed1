#pragma once
// The configured backend set, and how the running set follows it: on SIGHUP
// (a new file) and every refresh_secs for `resolve: all` entries (a DNS name
// whose addresses are each a server, like a headless Service). Pure: the
// resolver is passed in, the result is a list of changes to apply.

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace scg::actors {

/// One backend the configuration asks for, after its name is resolved.
struct backend_spec {
  std::string name;
  std::string address;  ///< "host:port", "ip:port" or "[ip6]:port"
  std::string ui_url;   ///< with "{host}" filled in
  bool operator==(const backend_spec& o) const {
    return name == o.name && address == o.address && ui_url == o.ui_url;
  }
};

/// Addresses `host` resolves to now (IPv6 without brackets); empty when it
/// does not resolve.
using host_resolver = std::function<std::vector<std::string>(const std::string& host)>;

/// What the configuration asks for now.
struct wanted_backends {
  std::vector<backend_spec> specs;
  /// `resolve: all` entries whose name did not resolve this time: the
  /// backends they brought before stay as they are (a DNS hiccup is not a
  /// reason to drop servers).
  std::vector<std::string> unresolved;
};

/// Expands `entries`: a `resolve: all` entry becomes one backend per address
/// ("NAME@IP:PORT"), in address order; any other entry is one backend.
wanted_backends expand(const std::vector<config::backend>& entries, const host_resolver& resolve);

/// A backend of the running set, by its registry index.
struct running_backend {
  backend_spec spec;
  bool removed = false;
};

struct backend_change {
  enum class kind { add, remove, restore };
  kind what;
  backend_spec spec;
  std::size_t index = 0;  ///< the running entry removed or restored (not for add)
};

/// The changes that make `running` serve `wanted`: new names are added, names
/// no longer wanted are removed (no new sessions; their sessions carry on),
/// names that come back are restored, and a name whose address or ui_url
/// changed is removed and added anew.
std::vector<backend_change> plan_changes(const std::vector<running_backend>& running,
                                         const wanted_backends& wanted);

/// Resolves with getaddrinfo (TCP, any family), addresses sorted and unique.
std::vector<std::string> resolve_host(const std::string& host);

}  // namespace scg::actors

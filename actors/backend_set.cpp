#include "actors/backend_set.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "core/address.hpp"

namespace scg::actors {
namespace {

using core::with_host;

}  // namespace

wanted_backends expand(const std::vector<config::backend>& entries, const host_resolver& resolve) {
  wanted_backends out;
  for (const auto& e : entries) {
    // The config parser validated the address; one that still does not
    // parse is kept as written, for the connection to report.
    const auto hp = core::parse_host_port(e.address);
    if (!e.resolve_all || !hp) {
      out.specs.push_back({e.name, e.address, with_host(e.ui_url, hp ? core::bracketed(hp->host) : "")});
      continue;
    }
    auto ips = resolve(hp->host);
    if (ips.empty()) {
      out.unresolved.push_back(e.name);
      continue;
    }
    std::sort(ips.begin(), ips.end());
    ips.erase(std::unique(ips.begin(), ips.end()), ips.end());
    for (const auto& ip : ips) {
      const std::string address = core::host_port{ip, hp->port}.str();
      out.specs.push_back({e.name + "@" + address, address, with_host(e.ui_url, core::bracketed(ip))});
    }
  }
  return out;
}

std::vector<backend_change> plan_changes(const std::vector<running_backend>& running,
                                         const wanted_backends& wanted) {
  using kind = backend_change::kind;
  // The newest running entry of each name is the one that counts.
  auto newest = [&](const std::string& name) -> const running_backend* {
    for (std::size_t i = running.size(); i-- > 0;)
      if (running[i].spec.name == name) return &running[i];
    return nullptr;
  };
  auto index_of = [&](const running_backend* r) { return static_cast<std::size_t>(r - running.data()); };
  auto kept_unresolved = [&](const std::string& name) {
    for (const auto& entry : wanted.unresolved)
      if (name.rfind(entry + "@", 0) == 0) return true;
    return false;
  };

  std::vector<backend_change> out;
  std::set<std::string> wanted_names;
  for (const auto& w : wanted.specs) {
    wanted_names.insert(w.name);
    const auto* r = newest(w.name);
    if (!r) {
      out.push_back({kind::add, w, 0});
    } else if (r->spec == w) {
      if (r->removed) out.push_back({kind::restore, w, index_of(r)});
    } else {
      if (!r->removed) out.push_back({kind::remove, r->spec, index_of(r)});
      out.push_back({kind::add, w, 0});
    }
  }
  for (const auto& r : running) {
    if (r.removed || wanted_names.count(r.spec.name) || kept_unresolved(r.spec.name)) continue;
    if (newest(r.spec.name) != &r) continue;
    out.push_back({kind::remove, r.spec, index_of(&r)});
  }
  return out;
}

std::vector<std::string> resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  std::set<std::string> ips;
  for (auto* p = res; p; p = p->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr = p->ai_family == AF_INET
                           ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
    if (inet_ntop(p->ai_family, addr, buf, sizeof buf)) ips.insert(buf);
  }
  freeaddrinfo(res);
  return {ips.begin(), ips.end()};
}

}  // namespace scg::actors

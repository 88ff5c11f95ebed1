#include "config/config.hpp"
#include "config/yaml_read.hpp"
#include "core/address.hpp"
#include "core/file.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace scg::config {
namespace {

constexpr const char* default_cluster_bind_addr = "0.0.0.0:7400";

using namespace yaml;

std::string host_port(const YAML::Node& n, const std::string& path, bool allow_zero_port) {
  std::string s = as_string(n, path);
  if (!core::parse_host_port(s, allow_zero_port)) reject(path, in_quotes(s) + " is not host:port");
  return s;
}

// Reads optional weight `key` (left as is when absent).
void read_weight(const YAML::Node& parent, const std::string& path, const char* key, double& out) {
  if (!parent[key]) return;
  out = as_number(parent[key], child(path, key));
  if (out < 0) reject(child(path, key), "must not be negative, got " + parent[key].Scalar());
}

std::vector<backend> parse_backends(const YAML::Node& n, bool discovered) {
  const std::string path = "backends";
  if (present(n) && !n.IsSequence()) reject(path, "expected a list, got " + describe(n));
  if (!discovered && (!present(n) || n.size() == 0))
    reject(path, "at least one backend is required (or backend_discovery)");
  if (!present(n)) return {};
  std::vector<backend> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& b = n[i];
    const std::string at = item(path, i);
    backend be;
    std::string name_path = at;
    if (b.IsScalar()) {
      be.address = host_port(b, at, false);
      be.name = be.address;
    } else if (b.IsMap()) {
      check_keys(b, at, {"address", "name", "ui_url", "resolve"});
      if (!b["address"]) reject(child(at, "address"), "required");
      be.address = host_port(b["address"], child(at, "address"), false);
      be.name = be.address;
      if (b["name"]) {
        name_path = child(at, "name");
        be.name = non_empty(b["name"], name_path);
        if (be.name.find('@') != std::string::npos)
          reject(name_path, "'@' is kept for the names of resolved addresses (NAME@IP:PORT)");
      }
      if (b["resolve"]) {
        const auto mode = as_string(b["resolve"], child(at, "resolve"));
        if (mode != "all" && mode != "one")
          reject(child(at, "resolve"), "expected all or one, got " + in_quotes(mode));
        be.resolve_all = mode == "all";
      }
      if (b["ui_url"]) {
        be.ui_url = as_string(b["ui_url"], child(at, "ui_url"));
        if (be.ui_url.rfind("http://", 0) != 0 && be.ui_url.rfind("https://", 0) != 0)
          reject(child(at, "ui_url"), in_quotes(be.ui_url) + " is not an http:// or https:// URL");
      }
    } else {
      reject(at, "expected \"host:port\" or a map, got " + describe(b));
    }
    for (const auto& other : out)
      if (other.name == be.name) reject(name_path, "duplicate backend name " + in_quotes(be.name));
    out.push_back(std::move(be));
  }
  return out;
}

void parse_placement(const YAML::Node& n, placement& p) {
  const std::string path = "placement";
  check_keys(n, path,
             {"strategy", "poll_interval_ms", "ewma_alpha", "utilization_weight", "session_weight",
              "session_cap", "shed_above"});
  if (n["strategy"]) {
    p.strategy = as_string(n["strategy"], "placement.strategy");
    if (p.strategy != "least_loaded" && p.strategy != "round_robin")
      reject("placement.strategy",
             "unknown strategy " + in_quotes(p.strategy) + " (expected least_loaded or round_robin)");
  }
  read_int(n, path, "poll_interval_ms", p.poll_interval_ms, 1);
  if (n["ewma_alpha"]) {
    p.ewma_alpha = as_number(n["ewma_alpha"], "placement.ewma_alpha");
    if (!(p.ewma_alpha > 0 && p.ewma_alpha <= 1))
      reject("placement.ewma_alpha",
             "must be greater than 0 and at most 1, got " + n["ewma_alpha"].Scalar());
  }
  read_weight(n, path, "utilization_weight", p.utilization_weight);
  read_weight(n, path, "session_weight", p.session_weight);
  read_int(n, path, "session_cap", p.session_cap, 1);
  if (n["shed_above"]) {
    double v = as_number(n["shed_above"], "placement.shed_above");
    if (!(v > 0 && v <= 1)) reject("placement.shed_above", "must be greater than 0 and at most 1, got " + n["shed_above"].Scalar());
    p.shed_above = v;
  }
}

bulkhead parse_bulkhead(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"max_sessions", "max_executions", "max_execution_secs"});
  bulkhead b;
  read_int(n, path, "max_sessions", b.max_sessions, 0);
  read_int(n, path, "max_executions", b.max_executions, 0);
  read_int(n, path, "max_execution_secs", b.max_execution_secs, 0);
  return b;
}

cluster parse_cluster(const YAML::Node& n) {
  check_keys(n, "cluster",
             {"node_name", "bind_addr", "seeds", "identity", "heartbeat_interval_ms",
              "connection_timeout_ms", "sync_wait_secs", "forget_after_secs", "settle_ms", "tls"});
  cluster c;
  if (!n["node_name"]) reject("cluster.node_name", "required");
  c.node_name = non_empty(n["node_name"], "cluster.node_name");
  c.bind_addr = n["bind_addr"] ? host_port(n["bind_addr"], "cluster.bind_addr", true)
                               : default_cluster_bind_addr;
  if (const YAML::Node& seeds = n["seeds"]; present(seeds)) {
    if (!seeds.IsSequence()) reject("cluster.seeds", "expected a list, got " + describe(seeds));
    for (std::size_t i = 0; i < seeds.size(); ++i)
      c.seeds.push_back(host_port(seeds[i], item("cluster.seeds", i), false));
  }
  if (n["identity"]) c.identity = non_empty(n["identity"], "cluster.identity");
  read_int(n, "cluster", "heartbeat_interval_ms", c.heartbeat_interval_ms, 10);
  read_int(n, "cluster", "connection_timeout_ms", c.connection_timeout_ms, 50);
  read_int(n, "cluster", "sync_wait_secs", c.sync_wait_secs, 0);
  read_int(n, "cluster", "forget_after_secs", c.forget_after_secs, 0);
  read_int(n, "cluster", "settle_ms", c.settle_ms, 0);
  if (const YAML::Node& t = n["tls"]; present(t)) {
    if (!t.IsMap()) reject("cluster.tls", "expected a map, got " + describe(t));
    check_keys(t, "cluster.tls", {"cert_file", "key_file", "ca_file"});
    cluster_tls tls;
    for (auto [key, out] : {std::pair{"cert_file", &tls.cert_file}, std::pair{"key_file", &tls.key_file},
                            std::pair{"ca_file", &tls.ca_file}}) {
      const std::string path = std::string("cluster.tls.") + key;
      if (!t[key]) reject(path, "required");
      *out = non_empty(t[key], path);
    }
    c.tls = std::move(tls);
  }
  if (c.connection_timeout_ms <= c.heartbeat_interval_ms)
    reject("cluster.connection_timeout_ms", "must be longer than cluster.heartbeat_interval_ms");
  return c;
}

/// A file the replica must read at start: it must exist and be readable now.
std::string readable_file(const YAML::Node& n, const std::string& path) {
  auto file = non_empty(n, path);
  if (access(file.c_str(), R_OK) != 0) reject(path, "cannot read " + in_quotes(file) + ": " + std::strerror(errno));
  return file;
}

front_tls parse_front_tls(const YAML::Node& t) {
  check_keys(t, "tls", {"cert_file", "key_file", "client_ca_file"});
  front_tls tls;
  for (auto key : {"cert_file", "key_file"})
    if (!t[key]) reject(std::string("tls.") + key, "required");
  tls.cert_file = readable_file(t["cert_file"], "tls.cert_file");
  tls.key_file = readable_file(t["key_file"], "tls.key_file");
  if (t["client_ca_file"]) tls.client_ca_file = readable_file(t["client_ca_file"], "tls.client_ca_file");
  return tls;
}

tracing parse_tracing(const YAML::Node& n) {
  check_keys(n, "tracing",
             {"otlp_endpoint", "service_name", "queue_capacity", "batch_size", "flush_interval_ms", "timeout_ms"});
  tracing t;
  if (!n["otlp_endpoint"]) reject("tracing.otlp_endpoint", "required");
  t.otlp_endpoint = as_string(n["otlp_endpoint"], "tracing.otlp_endpoint");
  if (!core::parse_url(t.otlp_endpoint))
    reject("tracing.otlp_endpoint", in_quotes(t.otlp_endpoint) + " is not an http:// or https:// URL with a host");
  if (n["service_name"]) t.service_name = non_empty(n["service_name"], "tracing.service_name");
  read_int(n, "tracing", "queue_capacity", t.queue_capacity, 1);
  read_int(n, "tracing", "batch_size", t.batch_size, 1);
  read_int(n, "tracing", "flush_interval_ms", t.flush_interval_ms, 1);
  read_int(n, "tracing", "timeout_ms", t.timeout_ms, 1);
  return t;
}

k8s_discovery parse_discovery(const YAML::Node& n) {
  const std::string path = "backend_discovery";
  check_keys(n, path, {"type", "namespace", "service_name", "port", "ui_url", "api_server", "token_file", "ca_file",
                       "resync_secs"});
  if (!n["type"]) reject(child(path, "type"), "required (k8s)");
  if (auto type = as_string(n["type"], child(path, "type")); type != "k8s")
    reject(child(path, "type"), "unknown type " + in_quotes(type) + " (expected k8s)");
  k8s_discovery d;
  for (auto [key, out] : {std::pair{"namespace", &d.namespace_}, std::pair{"service_name", &d.service_name}}) {
    if (!n[key]) reject(child(path, key), "required");
    *out = non_empty(n[key], child(path, key));
  }
  if (n["port"]) d.port = static_cast<int>(integer_in(n["port"], child(path, "port"), 1, 65535));
  for (auto [key, out] : {std::pair{"ui_url", &d.ui_url}, std::pair{"api_server", &d.api_server},
                          std::pair{"token_file", &d.token_file}, std::pair{"ca_file", &d.ca_file}})
    if (n[key]) *out = as_string(n[key], child(path, key));
  for (auto [key, url] : {std::pair{"ui_url", d.ui_url}, std::pair{"api_server", d.api_server}})
    if (!url.empty() && url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
      reject(child(path, key), in_quotes(url) + " is not an http:// or https:// URL");
  read_int(n, path, "resync_secs", d.resync_secs, 1);
  return d;
}

admin_plane parse_admin(const YAML::Node& n) {
  const std::string path = "admin";
  check_keys(n, path, {"token_file", "read_token_file", "allow_unauthenticated", "open_metrics", "probe_addr",
                       "max_connections", "idle_timeout_ms", "request_timeout_ms", "max_heavy_requests"});
  admin_plane a;
  for (auto [key, out] : {std::pair{"token_file", &a.token_file}, std::pair{"read_token_file", &a.read_token_file}})
    if (n[key]) *out = non_empty(n[key], child(path, key));
  for (auto [key, out] : {std::pair{"allow_unauthenticated", &a.allow_unauthenticated},
                          std::pair{"open_metrics", &a.open_metrics}})
    if (n[key]) {
      const auto v = as_string(n[key], child(path, key));
      if (v != "true" && v != "false") reject(child(path, key), "expected true or false, got " + in_quotes(v));
      *out = v == "true";
    }
  if (a.allow_unauthenticated && (!a.token_file.empty() || !a.read_token_file.empty()))
    reject(child(path, "allow_unauthenticated"), "cannot be true while a token file is set (a token would protect nothing)");
  if (const YAML::Node p = n["probe_addr"]; p && !p.IsNull()) a.probe_addr = host_port(p, child(path, "probe_addr"), true);
  read_int(n, path, "max_connections", a.max_connections, 8, 100000);
  read_int(n, path, "idle_timeout_ms", a.idle_timeout_ms, 100, 3600000);
  read_int(n, path, "request_timeout_ms", a.request_timeout_ms, 100, 600000);
  read_int(n, path, "max_heavy_requests", a.max_heavy_requests, 1, 1000);
  return a;
}

gateway parse_gateway(const YAML::Node& root) {
  // An empty document keeps every default, and so lacks the one required key.
  if (!present(root)) reject("backends", "at least one backend is required");
  check_keys(root, "",
             {"bind_addr", "workers", "admin_addr", "backends", "backend_refresh_secs", "placement", "affinity", "limits", "health",
              "on_backend_lost", "keepalive", "shutdown", "drain", "reload", "logging", "cluster", "tls", "auth", "tenants",
              "backend_token", "rate_limits", "backend_discovery", "tracing", "accounting", "admin"});
  gateway g;

  if (const YAML::Node n = root["bind_addr"]) g.bind_addr = host_port(n, "bind_addr", true);
  if (const YAML::Node n = root["admin_addr"])
    g.admin_addr =
        n.IsNull() ? std::nullopt : std::optional<std::string>(host_port(n, "admin_addr", true));
  if (const YAML::Node n = root["admin"]; present(n)) g.admin = parse_admin(n);
  if (const YAML::Node n = root["backend_discovery"]; present(n)) g.backend_discovery = parse_discovery(n);
  g.backends = parse_backends(root["backends"], g.backend_discovery.has_value());
  read_int(root, "", "backend_refresh_secs", g.backend_refresh_secs, 1);
  read_int(root, "", "workers", g.workers, 0, 256);
  if (const YAML::Node n = root["tls"]; present(n)) g.tls = parse_front_tls(n);
  {
    std::vector<std::string> names;
    for (const auto& b : g.backends) names.push_back(b.name);
    auto security = parse_security(root, names);
    if (auto* err = std::get_if<error>(&security)) throw bad_field{*err};
    g.security = std::move(std::get<security_config>(security));
  }
  if (const YAML::Node n = root["placement"]; present(n)) parse_placement(n, g.placement);
  if (const YAML::Node n = root["affinity"]; present(n)) {
    check_keys(n, "affinity", {"session_ttl_secs", "op_ttl_secs"});
    read_int(n, "affinity", "session_ttl_secs", g.affinity.session_ttl_secs, 1);
    read_int(n, "affinity", "op_ttl_secs", g.affinity.op_ttl_secs, 1);
  }
  if (const YAML::Node n = root["limits"]; present(n)) {
    check_keys(n, "limits", {"max_message_bytes", "connect_timeout_ms", "retry_status", "per_tenant", "tenants",
                             "buffer_mib", "max_client_connections", "handshake_timeout_secs",
                             "idle_connection_secs", "first_message_secs", "sched_slice_us"});
    read_int(n, "limits", "buffer_mib", g.limits.buffer_mib, 16, 1 << 20);
    read_int(n, "limits", "max_client_connections", g.limits.max_client_connections, 0);
    read_int(n, "limits", "handshake_timeout_secs", g.limits.handshake_timeout_secs, 1, 3600);
    read_int(n, "limits", "idle_connection_secs", g.limits.idle_connection_secs, 0);
    read_int(n, "limits", "first_message_secs", g.limits.first_message_secs, 0);
    read_int(n, "limits", "sched_slice_us", g.limits.sched_slice_us, 0, 100'000);
    if (g.limits.sched_slice_us > 0 && g.limits.sched_slice_us < 100)
      reject("limits.sched_slice_us", "Linux takes slices of 100 to 100000 us (0: the kernel's default), got " +
                                          std::to_string(g.limits.sched_slice_us));
    if (n["retry_status"]) {
      const auto v = as_string(n["retry_status"], "limits.retry_status");
      if (v != "resource_exhausted" && v != "unavailable")
        reject("limits.retry_status", "unknown status " + in_quotes(v) + " (expected resource_exhausted or unavailable)");
      g.limits.retry_unavailable = v == "unavailable";
    }
    if (n["max_message_bytes"])
      g.limits.max_message_bytes = static_cast<std::size_t>(
          integer_in(n["max_message_bytes"], "limits.max_message_bytes", 1024, INT_MAX));
    read_int(n, "limits", "connect_timeout_ms", g.limits.connect_timeout_ms, 1);
    if (const YAML::Node b = n["per_tenant"]; present(b)) g.limits.per_tenant = parse_bulkhead(b, "limits.per_tenant");
    if (const YAML::Node t = n["tenants"]; present(t)) {
      if (!t.IsMap()) reject("limits.tenants", "expected a map, got " + describe(t));
      for (const auto& kv : t) {
        const auto name = as_string(kv.first, "limits.tenants");
        if (!valid_tenant_name(name)) reject(child("limits.tenants", name), "not a valid tenant name");
        g.limits.tenants[name] = parse_bulkhead(kv.second, child("limits.tenants", name));
      }
    }
  }
  if (const YAML::Node n = root["keepalive"]; present(n)) {
    check_keys(n, "keepalive", {"interval_secs", "timeout_secs"});
    read_int(n, "keepalive", "interval_secs", g.keepalive.interval_secs, 0, 3600);
    read_int(n, "keepalive", "timeout_secs", g.keepalive.timeout_secs, 1, 3600);
  }
  if (const YAML::Node n = root["health"]; present(n)) {
    check_keys(n, "health", {"interval_ms", "timeout_ms", "failures", "successes"});
    read_int(n, "health", "interval_ms", g.health.interval_ms, 10);
    read_int(n, "health", "timeout_ms", g.health.timeout_ms, 10);
    read_int(n, "health", "failures", g.health.failures, 1);
    read_int(n, "health", "successes", g.health.successes, 1);
  }
  if (const YAML::Node n = root["on_backend_lost"]; present(n)) {
    check_keys(n, "on_backend_lost", {"after_secs", "action"});
    read_int(n, "on_backend_lost", "after_secs", g.on_backend_lost.after_secs, 0);
    if (n["action"]) {
      g.on_backend_lost.action = as_string(n["action"], "on_backend_lost.action");
      if (g.on_backend_lost.action != "rebind" && g.on_backend_lost.action != "fail")
        reject("on_backend_lost.action",
               "unknown action " + in_quotes(g.on_backend_lost.action) + " (expected rebind or fail)");
    }
  }
  if (const YAML::Node n = root["shutdown"]; present(n)) {
    check_keys(n, "shutdown", {"deadline_secs"});
    read_int(n, "shutdown", "deadline_secs", g.shutdown.deadline_secs, 0);
  }
  if (const YAML::Node n = root["drain"]; present(n)) {
    check_keys(n, "drain", {"idle_secs"});
    read_int(n, "drain", "idle_secs", g.drain.idle_secs, 1, 86400);
  }
  if (const YAML::Node n = root["reload"]; present(n)) {
    check_keys(n, "reload", {"watch_secs"});
    read_int(n, "reload", "watch_secs", g.reload.watch_secs, 0, 3600);
  }
  if (const YAML::Node n = root["logging"]; present(n)) {
    check_keys(n, "logging", {"level", "format"});
    if (n["format"]) {
      g.logging.format = as_string(n["format"], "logging.format");
      if (g.logging.format != "json" && g.logging.format != "text")
        reject("logging.format", "unknown format " + in_quotes(g.logging.format) + " (expected json or text)");
    }
    if (n["level"]) {
      g.logging.level = as_string(n["level"], "logging.level");
      bool known = false;
      for (const char* l : {"trace", "debug", "info", "warn", "error", "off"})
        known = known || g.logging.level == l;
      if (!known)
        reject("logging.level", "unknown level " + in_quotes(g.logging.level) +
                                    " (expected trace, debug, info, warn, error or off)");
    }
  }
  if (const YAML::Node n = root["cluster"]; present(n)) g.cluster = parse_cluster(n);
  if (const YAML::Node n = root["tracing"]; present(n)) g.tracing = parse_tracing(n);
  if (const YAML::Node n = root["accounting"]; present(n)) {
    check_keys(n, "accounting", {"max_tenants", "max_users", "prometheus_users"});
    read_int(n, "accounting", "max_tenants", g.accounting.max_tenants, 1, 100000);
    read_int(n, "accounting", "max_users", g.accounting.max_users, 1, 1000000);
    read_int(n, "accounting", "prometheus_users", g.accounting.prometheus_users, 0, 1000);
    if (g.accounting.prometheus_users > g.accounting.max_users)
      reject("accounting.prometheus_users", "at most accounting.max_users (" +
                                                std::to_string(g.accounting.max_users) + ")");
  }
  return g;
}

}  // namespace

std::string error::to_string() const { return field + ": " + message; }

result parse(const std::string& yaml_text) {
  try {
    return parse_gateway(YAML::Load(yaml_text));
  } catch (const bad_field& e) {
    return e.err;
  } catch (const YAML::ParserException& e) {
    return error{"(yaml)", "line " + std::to_string(e.mark.line + 1) + ", column " +
                               std::to_string(e.mark.column + 1) + ": " + e.msg};
  } catch (const std::exception& e) {
    // yaml-cpp can still throw on odd documents; report rather than escape.
    return error{"(yaml)", e.what()};
  }
}

result load(const std::string& path) {
  std::string why;
  auto text = core::read_file(path, why);
  if (!text) return error{"(file)", why};
  return parse(*text);
}

}  // namespace scg::config

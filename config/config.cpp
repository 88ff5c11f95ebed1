#include "config/config.hpp"
#include "config/yaml_read.hpp"
#include "core/address.hpp"
#include "core/file.hpp"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace scg::config {
namespace {

using namespace yaml;

constexpr named<bool> true_false[] = {{"true", true}, {"false", false}};
constexpr named<bool> resolve_modes[] = {{"all", true}, {"one", false}};  // resolve_all
constexpr named<bool> retry_statuses[] = {{"resource_exhausted", false}, {"unavailable", true}};  // retry_unavailable
constexpr named<bool> discovery_types[] = {{"k8s", true}};  // the one there is

std::string host_port(const YAML::Node& n, const std::string& path, bool allow_zero_port) {
  std::string s = as_string(n, path);
  if (!core::parse_host_port(s, allow_zero_port)) reject(path, in_quotes(s) + " is not host:port");
  return s;
}

/// host:port; `allow_zero_port` for listening addresses (any free port).
reader address(std::string& out, bool allow_zero_port) {
  return [&out, allow_zero_port](const YAML::Node& n, const std::string& path) {
    out = host_port(n, path, allow_zero_port);
  };
}

/// A listening host:port that null turns off.
reader address_or_null(std::optional<std::string>& out) {
  return [&out](const YAML::Node& n, const std::string& path) {
    out = n.IsNull() ? std::nullopt : std::optional<std::string>(host_port(n, path, true));
  };
}

/// A weight of the score: a number, not negative.
reader weight(double& out) {
  return [&out](const YAML::Node& n, const std::string& path) {
    out = as_number(n, path);
    if (out < 0) reject(path, "must not be negative, got " + n.Scalar());
  };
}

/// A number greater than 0 and at most 1, into a double or an optional one.
template <class D>
reader fraction(D& out) {
  return [&out](const YAML::Node& n, const std::string& path) {
    const double v = as_number(n, path);
    if (!(v > 0 && v <= 1)) reject(path, "must be greater than 0 and at most 1, got " + n.Scalar());
    out = v;
  };
}

bool is_http_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

/// An http:// or https:// URL.
reader url(std::string& out) {
  return [&out](const YAML::Node& n, const std::string& path) {
    out = as_string(n, path);
    if (!is_http_url(out)) reject(path, in_quotes(out) + " is not an http:// or https:// URL");
  };
}

/// A file the replica must read at start: it must exist and be readable now.
reader readable_file(std::string& out) {
  return [&out](const YAML::Node& n, const std::string& path) {
    out = non_empty(n, path);
    if (access(out.c_str(), R_OK) != 0)
      reject(path, "cannot read " + in_quotes(out) + ": " + std::strerror(errno));
  };
}

backend parse_backend(const YAML::Node& b, const std::string& at) {
  backend be;
  if (b.IsScalar()) {
    be.address = host_port(b, at, false);
    be.name = be.address;
    return be;
  }
  if (!b.IsMap()) reject(at, "expected \"host:port\" or a map, got " + describe(b));
  read_fields(b, at,
              {{"address",
                [&](const YAML::Node& n, const std::string& path) { be.name = be.address = host_port(n, path, false); },
                "required"},
               {"name",
                [&](const YAML::Node& n, const std::string& path) {
                  be.name = non_empty(n, path);
                  if (be.name.find('@') != std::string::npos)
                    reject(path, "'@' is kept for the names of resolved addresses (NAME@IP:PORT)");
                }},
               {"resolve", choice(be.resolve_all, nullptr, resolve_modes)},
               {"ui_url", url(be.ui_url)}});
  return be;
}

std::vector<backend> parse_backends(const YAML::Node& n, bool discovered) {
  const std::string path = "backends";
  if (present(n) && !n.IsSequence()) reject(path, "expected a list, got " + describe(n));
  if (!discovered && (!present(n) || n.size() == 0))
    reject(path, "at least one backend is required (or backend_discovery)");
  if (!present(n)) return {};
  std::vector<backend> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string at = item(path, i);
    backend be = parse_backend(n[i], at);
    const std::string name_path = n[i].IsMap() && n[i]["name"] ? child(at, "name") : at;
    for (const auto& other : out)
      if (other.name == be.name) reject(name_path, "duplicate backend name " + in_quotes(be.name));
    out.push_back(std::move(be));
  }
  return out;
}

void parse_placement(const YAML::Node& n, const std::string& path, placement& p) {
  read_fields(n, path,
              {{"strategy", choice(p.strategy, "strategy", placement_strategy_names)},
               {"poll_interval_ms", integer(p.poll_interval_ms, 1)},
               {"ewma_alpha", fraction(p.ewma_alpha)},
               {"utilization_weight", weight(p.utilization_weight)},
               {"session_weight", weight(p.session_weight)},
               {"session_cap", integer(p.session_cap, 1)},
               {"shed_above", fraction(p.shed_above)}});
}

bulkhead parse_bulkhead(const YAML::Node& n, const std::string& path) {
  bulkhead b;
  read_fields(n, path,
              {{"max_sessions", integer(b.max_sessions, 0)},
               {"max_executions", integer(b.max_executions, 0)},
               {"max_execution_secs", integer(b.max_execution_secs, 0)}});
  return b;
}

void parse_limits(const YAML::Node& n, const std::string& path, limits& l) {
  read_fields(
      n, path,
      {{"buffer_mib", integer(l.buffer_mib, 16, 1 << 20)},
       {"max_client_connections", integer(l.max_client_connections, 0)},
       {"handshake_timeout_secs", integer(l.handshake_timeout_secs, 1, 3600)},
       {"idle_connection_secs", integer(l.idle_connection_secs, 0)},
       {"first_message_secs", integer(l.first_message_secs, 0)},
       {"sched_slice_us",
        [&](const YAML::Node& v, const std::string& at) {
          integer(l.sched_slice_us, 0, 100'000)(v, at);
          if (l.sched_slice_us > 0 && l.sched_slice_us < 100)
            reject(at, "Linux takes slices of 100 to 100000 us (0: the kernel's default), got " +
                           std::to_string(l.sched_slice_us));
        }},
       {"retry_status", choice(l.retry_unavailable, "status", retry_statuses)},
       {"max_message_bytes",
        [&](const YAML::Node& v, const std::string& at) {
          l.max_message_bytes = static_cast<std::size_t>(integer_in(v, at, 1024, INT_MAX));
        }},
       {"connect_timeout_ms", integer(l.connect_timeout_ms, 1)},
       {"per_tenant", section([&](const YAML::Node& v, const std::string& at) { l.per_tenant = parse_bulkhead(v, at); })},
       {"tenants", section([&](const YAML::Node& t, const std::string& at) {
          if (!t.IsMap()) reject(at, "expected a map, got " + describe(t));
          for (const auto& kv : t) {
            const auto name = as_string(kv.first, at);
            if (!valid_tenant_name(name)) reject(child(at, name), "not a valid tenant name");
            l.tenants[name] = parse_bulkhead(kv.second, child(at, name));
          }
        })}});
}

cluster parse_cluster(const YAML::Node& n, const std::string& path) {
  cluster c;
  read_fields(n, path,
              {{"node_name", non_empty_text(c.node_name), "required"},
               {"bind_addr", address(c.bind_addr, true)},
               {"seeds", section([&](const YAML::Node& seeds, const std::string& at) {
                  if (!seeds.IsSequence()) reject(at, "expected a list, got " + describe(seeds));
                  for (std::size_t i = 0; i < seeds.size(); ++i) c.seeds.push_back(host_port(seeds[i], item(at, i), false));
                })},
               {"identity", non_empty_text(c.identity)},
               {"heartbeat_interval_ms", integer(c.heartbeat_interval_ms, 10)},
               {"connection_timeout_ms", integer(c.connection_timeout_ms, 50)},
               {"sync_wait_secs", integer(c.sync_wait_secs, 0)},
               {"forget_after_secs", integer(c.forget_after_secs, 0)},
               {"settle_ms", integer(c.settle_ms, 0)},
               {"tls", section([&](const YAML::Node& t, const std::string& at) {
                  cluster_tls tls;
                  read_fields(t, at,
                              {{"cert_file", non_empty_text(tls.cert_file), "required"},
                               {"key_file", non_empty_text(tls.key_file), "required"},
                               {"ca_file", non_empty_text(tls.ca_file), "required"}});
                  c.tls = std::move(tls);
                })}});
  if (c.connection_timeout_ms <= c.heartbeat_interval_ms)
    reject(child(path, "connection_timeout_ms"), "must be longer than cluster.heartbeat_interval_ms");
  return c;
}

front_tls parse_front_tls(const YAML::Node& n, const std::string& path) {
  front_tls tls;
  read_fields(n, path,
              {{"",
                [](const YAML::Node& t, const std::string& at) {
                  for (auto key : {"cert_file", "key_file"})
                    if (!t[key]) reject(child(at, key), "required");
                }},
               {"cert_file", readable_file(tls.cert_file)},
               {"key_file", readable_file(tls.key_file)},
               {"client_ca_file", readable_file(tls.client_ca_file)}});
  return tls;
}

tracing parse_tracing(const YAML::Node& n, const std::string& path) {
  tracing t;
  read_fields(n, path,
              {{"otlp_endpoint",
                [&](const YAML::Node& v, const std::string& at) {
                  t.otlp_endpoint = as_string(v, at);
                  if (!core::parse_url(t.otlp_endpoint))
                    reject(at, in_quotes(t.otlp_endpoint) + " is not an http:// or https:// URL with a host");
                },
                "required"},
               {"service_name", non_empty_text(t.service_name)},
               {"queue_capacity", integer(t.queue_capacity, 1)},
               {"batch_size", integer(t.batch_size, 1)},
               {"flush_interval_ms", integer(t.flush_interval_ms, 1)},
               {"timeout_ms", integer(t.timeout_ms, 1)}});
  return t;
}

k8s_discovery parse_discovery(const YAML::Node& n, const std::string& path) {
  k8s_discovery d;
  read_fields(n, path,
              {{"type", [](const YAML::Node& v, const std::string& at) { one_of(v, at, "type", discovery_types); },
                "required (k8s)"},
               {"namespace", non_empty_text(d.namespace_), "required"},
               {"service_name", non_empty_text(d.service_name), "required"},
               {"port", integer(d.port, 1, 65535)},
               {"ui_url", text(d.ui_url)},
               {"api_server", text(d.api_server)},
               {"token_file", text(d.token_file)},
               {"ca_file", text(d.ca_file)},
               {"",
                [&](const YAML::Node&, const std::string& at) {
                  for (auto [key, value] : {std::pair{"ui_url", &d.ui_url}, std::pair{"api_server", &d.api_server}})
                    if (!value->empty() && !is_http_url(*value))
                      reject(child(at, key), in_quotes(*value) + " is not an http:// or https:// URL");
                }},
               {"resync_secs", integer(d.resync_secs, 1)}});
  return d;
}

admin_plane parse_admin(const YAML::Node& n, const std::string& path) {
  admin_plane a;
  read_fields(n, path,
              {{"token_file", non_empty_text(a.token_file)},
               {"read_token_file", non_empty_text(a.read_token_file)},
               {"allow_unauthenticated", choice(a.allow_unauthenticated, nullptr, true_false)},
               {"open_metrics", choice(a.open_metrics, nullptr, true_false)},
               {"",
                [&](const YAML::Node&, const std::string& at) {
                  if (a.allow_unauthenticated && (!a.token_file.empty() || !a.read_token_file.empty()))
                    reject(child(at, "allow_unauthenticated"),
                           "cannot be true while a token file is set (a token would protect nothing)");
                }},
               {"probe_addr",
                [&](const YAML::Node& v, const std::string& at) {
                  if (!v.IsNull()) a.probe_addr = host_port(v, at, true);
                }},
               {"max_connections", integer(a.max_connections, 8, 100000)},
               {"idle_timeout_ms", integer(a.idle_timeout_ms, 100, 3600000)},
               {"request_timeout_ms", integer(a.request_timeout_ms, 100, 600000)},
               {"max_heavy_requests", integer(a.max_heavy_requests, 1, 1000)}});
  return a;
}

void parse_accounting(const YAML::Node& n, const std::string& path, accounting& a) {
  read_fields(n, path,
              {{"max_tenants", integer(a.max_tenants, 1, 100000)},
               {"max_users", integer(a.max_users, 1, 1000000)},
               {"prometheus_users", integer(a.prometheus_users, 0, 1000)}});
  if (a.prometheus_users > a.max_users)
    reject(child(path, "prometheus_users"), "at most accounting.max_users (" + std::to_string(a.max_users) + ")");
}

/// A reader of a whole section by `parse(n, path, out)`; null or empty keeps the defaults.
template <class S>
reader into(S& out, void (*parse)(const YAML::Node&, const std::string&, S&)) {
  return section([&out, parse](const YAML::Node& n, const std::string& path) { parse(n, path, out); });
}

/// The same for a section whose parser returns it (into an optional or a plain member).
template <class Out, class S>
reader into(Out& out, S (*parse)(const YAML::Node&, const std::string&)) {
  return section([&out, parse](const YAML::Node& n, const std::string& path) { out = parse(n, path); });
}

gateway parse_gateway(const YAML::Node& root) {
  // An empty document keeps every default, and so lacks the one required key.
  if (!present(root)) reject("backends", "at least one backend is required");
  gateway g;
  const bool discovered = root.IsMap() && present(root["backend_discovery"]);
  std::vector<std::string> backend_names;  // for tenants.pools
  std::vector<field> fields = {
      {"bind_addr", address(g.bind_addr, true)},
      {"admin_addr", address_or_null(g.admin_addr)},
      {"admin", into(g.admin, parse_admin)},
      {"backend_discovery", into(g.backend_discovery, parse_discovery)},
      {"backends",
       [&](const YAML::Node& n, const std::string&) {
         g.backends = parse_backends(n, discovered);
         for (const auto& b : g.backends) backend_names.push_back(b.name);
       },
       discovered ? nullptr : "at least one backend is required (or backend_discovery)"},
      {"backend_refresh_secs", integer(g.backend_refresh_secs, 1)},
      {"workers", integer(g.workers, 0, 256)},
      {"tls", into(g.tls, parse_front_tls)},
  };
  const auto security = security_fields(g.security, backend_names);
  fields.insert(fields.end(), security.begin(), security.end());
  fields.insert(fields.end(), {
      {"placement", into(g.placement, parse_placement)},
      {"affinity", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path,
                     {{"session_ttl_secs", integer(g.affinity.session_ttl_secs, 1)},
                      {"op_ttl_secs", integer(g.affinity.op_ttl_secs, 1)}});
       })},
      {"limits", into(g.limits, parse_limits)},
      {"keepalive", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path,
                     {{"interval_secs", integer(g.keepalive.interval_secs, 0, 3600)},
                      {"timeout_secs", integer(g.keepalive.timeout_secs, 1, 3600)}});
       })},
      {"health", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path,
                     {{"interval_ms", integer(g.health.interval_ms, 10)},
                      {"timeout_ms", integer(g.health.timeout_ms, 10)},
                      {"failures", integer(g.health.failures, 1)},
                      {"successes", integer(g.health.successes, 1)}});
       })},
      {"on_backend_lost", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path,
                     {{"after_secs", integer(g.on_backend_lost.after_secs, 0)},
                      {"action", choice(g.on_backend_lost.action, "action", lost_action_names)},
                      {"max_journal_kib", integer(g.on_backend_lost.max_journal_kib, 1, 1 << 20)},
                      {"max_journal_total_mib", integer(g.on_backend_lost.max_journal_total_mib, 1, 1 << 20)},
                      {"spool_dir", text(g.on_backend_lost.spool_dir)},
                      {"max_artifacts_mib", integer(g.on_backend_lost.max_artifacts_mib, 1, 1 << 20)},
                      {"max_spool_mib", integer(g.on_backend_lost.max_spool_mib, 1, 1 << 24)},
                      {"tenants", [&](const YAML::Node& v, const std::string& at) {
                         if (!v.IsMap()) reject(at, "expected a map, got " + describe(v));
                         for (const auto& kv : v) {
                           const auto tenant = as_string(kv.first, at);
                           g.on_backend_lost.tenants[tenant] =
                               one_of(kv.second, at + "." + tenant, "action", lost_action_names);
                         }
                       }}});
       })},
      {"shutdown", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path, {{"deadline_secs", integer(g.shutdown.deadline_secs, 0)}});
       })},
      {"drain", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path, {{"idle_secs", integer(g.drain.idle_secs, 1, 86400)}});
       })},
      {"reload", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path, {{"watch_secs", integer(g.reload.watch_secs, 0, 3600)}});
       })},
      {"logging", section([&](const YAML::Node& n, const std::string& path) {
         read_fields(n, path,
                     {{"format", choice(g.logging.format, "format", log_format_names)},
                      {"level", choice(g.logging.level, "level", log_level_names)}});
       })},
      {"cluster", into(g.cluster, parse_cluster)},
      {"tracing", into(g.tracing, parse_tracing)},
      {"accounting", into(g.accounting, parse_accounting)},
  });
  read_fields(root, "", fields);
  // A session's calls may reach any replica, and journals are not shared yet:
  // a replay from one replica's part of a journal would restore the wrong state.
  if (g.cluster && g.on_backend_lost.any_replay())
    reject(g.on_backend_lost.action == lost_action::replay ? "on_backend_lost.action" : "on_backend_lost.tenants",
           "replay is not available with cluster: yet (journals are kept per replica); use rebind or fail");
  return g;
}

}  // namespace

result<gateway> parse(const std::string& yaml_text) {
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

result<gateway> load(const std::string& path) {
  std::string why;
  auto text = core::read_file(path, why);
  if (!text) return error{"(file)", why};
  return parse(*text);
}

}  // namespace scg::config

#include "config/config.hpp"

#include <catch2/catch.hpp>

#include <fstream>

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string>

using namespace scg::config;

namespace {

// Every key, with values other than the defaults.
const char* full_example = R"(
bind_addr: "0.0.0.0:15003"
admin_addr: "127.0.0.1:9090"
backends:
  - "spark-connect-0:15002"
  - { address: "spark-connect-1:15002", name: sc-1, ui_url: "http://spark-connect-1:4040" }
  - address: "10.0.0.7:15002"
  - { address: "spark-pool.spark.svc:15002", name: pool, resolve: all, ui_url: "http://{host}:4040" }
backend_refresh_secs: 10
workers: 3
placement:
  strategy: round_robin
  poll_interval_ms: 1500
  ewma_alpha: 0.5
  utilization_weight: 0.8
  session_weight: 0.2
  session_cap: 40
affinity:
  session_ttl_secs: 1800
  op_ttl_secs: 300
limits:
  max_message_bytes: 134217728
  connect_timeout_ms: 2500
  buffer_mib: 1024
  max_client_connections: 5000
  handshake_timeout_secs: 5
  idle_connection_secs: 0
  first_message_secs: 60
  sched_slice_us: 250
keepalive:
  interval_secs: 20
  timeout_secs: 5
shutdown:
  deadline_secs: 0
logging:
  level: debug
cluster:
  node_name: scg-0
  bind_addr: "0.0.0.0:7400"
  seeds: ["scg-1.scg-peers:7400", "[fd00::2]:7400"]
)";

gateway ok(const std::string& yaml) {
  auto r = parse(yaml);
  if (!r.ok()) FAIL("unexpected error: " << r.error().to_string());
  return r.value();
}

error bad(const std::string& yaml) {
  auto r = parse(yaml);
  REQUIRE_FALSE(r.ok());
  return r.error();
}

const std::string one_backend = "backends: [\"sc:15002\"]\n";

}  // namespace

TEST_CASE("a full configuration is read into every field", "[config]") {
  gateway g = ok(full_example);
  CHECK(g.bind_addr == "0.0.0.0:15003");
  CHECK(g.admin_addr == "127.0.0.1:9090");
  REQUIRE(g.backends.size() == 4);
  CHECK(g.backends[0].name == "spark-connect-0:15002");
  CHECK(g.backends[0].address == "spark-connect-0:15002");
  CHECK(g.backends[0].ui_url.empty());
  CHECK(g.backends[1].name == "sc-1");
  CHECK(g.backends[1].address == "spark-connect-1:15002");
  CHECK(g.backends[1].ui_url == "http://spark-connect-1:4040");
  CHECK(g.backends[2].name == "10.0.0.7:15002");
  CHECK_FALSE(g.backends[2].resolve_all);
  CHECK(g.backends[3].name == "pool");
  CHECK(g.backends[3].resolve_all);
  CHECK(g.backends[3].ui_url == "http://{host}:4040");
  CHECK(g.backend_refresh_secs == 10);
  CHECK(g.workers == 3);
  CHECK(g.placement.strategy == placement_strategy::round_robin);
  CHECK(g.placement.poll_interval_ms == 1500);
  CHECK(g.placement.ewma_alpha == 0.5);
  CHECK(g.placement.utilization_weight == 0.8);
  CHECK(g.placement.session_weight == 0.2);
  CHECK(g.placement.session_cap == 40);
  CHECK(g.affinity.session_ttl_secs == 1800);
  CHECK(g.affinity.op_ttl_secs == 300);
  CHECK(g.limits.max_message_bytes == 134217728u);
  CHECK(g.limits.connect_timeout_ms == 2500);
  CHECK(g.limits.buffer_mib == 1024);
  CHECK(g.limits.max_client_connections == 5000);
  CHECK(g.limits.handshake_timeout_secs == 5);
  CHECK(g.limits.idle_connection_secs == 0);
  CHECK(g.limits.first_message_secs == 60);
  CHECK(g.limits.sched_slice_us == 250);
  CHECK(g.keepalive.interval_secs == 20);
  CHECK(g.keepalive.timeout_secs == 5);
  CHECK(g.shutdown.deadline_secs == 0);
  CHECK(g.logging.level == log_level::debug);
  REQUIRE(g.cluster);
  CHECK(g.cluster->node_name == "scg-0");
  CHECK(g.cluster->bind_addr == "0.0.0.0:7400");
  CHECK(g.cluster->seeds == std::vector<std::string>{"scg-1.scg-peers:7400", "[fd00::2]:7400"});
}

/// The first ```yaml block after "## Complete example" in docs/configuration.md.
std::string documented_example() {
  std::ifstream in(std::string(SCG_SOURCE_DIR) + "/docs/configuration.md");
  std::string line, yaml;
  bool seen_heading = false, inside = false;
  while (std::getline(in, line)) {
    if (line == "## Complete example") seen_heading = true;
    else if (seen_heading && !inside && line == "```yaml") inside = true;
    else if (inside && line == "```") break;
    else if (inside) yaml += line + "\n";
  }
  return yaml;
}

TEST_CASE("the documented example is valid", "[config]") {
  const auto yaml = documented_example();
  REQUIRE(!yaml.empty());
  gateway g = ok(yaml);
  CHECK(g.backends.size() == 4);
  CHECK(g.backends[2].name == "sc-2");
  CHECK(g.backends[3].resolve_all);
  CHECK(g.cluster);
  CHECK(g.security.auth.type == scg::config::auth_type::static_tokens);
  CHECK(g.security.tenants.pools.count("team-a") == 1);
  CHECK(g.limits.per_tenant.max_sessions == 100);
  CHECK(g.placement.shed_above == 0.95);
}

TEST_CASE("a configuration with only backends takes every default", "[config]") {
  gateway g = ok(one_backend);
  gateway d;
  CHECK(g.bind_addr == d.bind_addr);
  CHECK(g.admin_addr == d.admin_addr);
  CHECK(g.placement.strategy == placement_strategy::least_loaded);
  CHECK(g.placement.session_cap == d.placement.session_cap);
  CHECK(g.limits.max_message_bytes == d.limits.max_message_bytes);
  CHECK(g.shutdown.deadline_secs == 30);
  CHECK(g.logging.level == log_level::info);
  CHECK(g.logging.format == scg::core::log_format::json);
  CHECK(g.on_backend_lost.action == lost_action::rebind);
  CHECK_FALSE(g.cluster);
  // Empty sections keep their defaults too.
  CHECK(ok(one_backend + "placement:\nlimits:\n").placement.ewma_alpha == d.placement.ewma_alpha);
}

TEST_CASE("drain.idle_secs and reload.watch_secs have defaults and bounds that name the key", "[config]") {
  auto d = ok(one_backend);
  CHECK(d.drain.idle_secs == 60);
  CHECK(d.reload.watch_secs == 10);
  auto g = ok(one_backend + "drain: { idle_secs: 5 }\nreload: { watch_secs: 0 }\n");
  CHECK(g.drain.idle_secs == 5);
  CHECK(g.reload.watch_secs == 0);
  CHECK(bad(one_backend + "drain: { idle_secs: 0 }\n").field == "drain.idle_secs");
  CHECK(bad(one_backend + "drain: { idle_secs: soon }\n").field == "drain.idle_secs");
  CHECK(bad(one_backend + "drain: { idle: 5 }\n").field == "drain.idle");
  CHECK(bad(one_backend + "reload: { watch_secs: -1 }\n").field == "reload.watch_secs");
}

TEST_CASE("admin_addr null disables the admin endpoint", "[config]") {
  CHECK_FALSE(ok(one_backend + "admin_addr: null\n").admin_addr);
  CHECK_FALSE(ok(one_backend + "admin_addr: ~\n").admin_addr);
  CHECK(ok(one_backend + "admin_addr: \"127.0.0.1:0\"\n").admin_addr == "127.0.0.1:0");
}

TEST_CASE("cluster bind_addr defaults and seeds may be left out", "[config]") {
  gateway g = ok(one_backend + "cluster: { node_name: scg-3 }\n");
  REQUIRE(g.cluster);
  CHECK(g.cluster->bind_addr == "0.0.0.0:7400");
  CHECK(g.cluster->seeds.empty());
}

TEST_CASE("configuration errors name the offending field", "[config]") {
  struct expect {
    std::string yaml, field, message;
  };
  const expect cases[] = {
      // backends
      {"bind_addr: \"0.0.0.0:1\"\n", "backends", "at least one backend is required (or backend_discovery)"},
      {"backends: []\n", "backends", "at least one backend is required (or backend_discovery)"},
      {"backend_discovery: { type: dns }\n", "backend_discovery.type", "unknown type \"dns\" (expected k8s)"},
      {"backend_discovery: { type: k8s, namespace: spark }\n", "backend_discovery.service_name", "required"},
      {"backend_discovery: { type: k8s, namespace: spark, service_name: sc, port: 0 }\n",
       "backend_discovery.port", "must be at least 1, got 0"},
      {"", "backends", "at least one backend is required"},
      {"backends: \"sc:1\"\n", "backends", "expected a list, got \"sc:1\""},
      {"backends: [\"sc:1\", { address: foo }]\n", "backends[1].address",
       "\"foo\" is not host:port"},
      {"backends: [\"sc:0\"]\n", "backends[0]", "\"sc:0\" is not host:port"},
      {"backends: [\"sc:1\"]\nlimits: { retry_status: maybe }\n", "limits.retry_status",
       "unknown status \"maybe\" (expected resource_exhausted or unavailable)"},
      {"backends: [[\"sc:1\"]]\n", "backends[0]", "expected \"host:port\" or a map, got a list"},
      {"backends: [{ name: x }]\n", "backends[0].address", "required"},
      {"backends: [{ address: { host: a } }]\n", "backends[0].address",
       "expected a string, got a map"},
      {"backends: [{ address: \"a:1\", nmae: x }]\n", "backends[0].nmae", "unknown key"},
      {"backends: [\"a:1\", \"a:1\"]\n", "backends[1]", "duplicate backend name \"a:1\""},
      {"backends: [{ address: \"a:1\", name: x }, { address: \"b:1\", name: x }]\n",
       "backends[1].name", "duplicate backend name \"x\""},
      {"backends: [{ address: \"a:1\", name: \"\" }]\n", "backends[0].name", "must not be empty"},
      {"backends: [{ address: \"a:1\", ui_url: \"a:4040\" }]\n", "backends[0].ui_url",
       "\"a:4040\" is not an http:// or https:// URL"},
      {"backends: [{ address: \"a:1\", resolve: every }]\n", "backends[0].resolve",
       "expected all or one, got \"every\""},
      {"backends: [{ address: \"a:1\", name: \"x@y\" }]\n", "backends[0].name",
       "'@' is kept for the names of resolved addresses (NAME@IP:PORT)"},
      {one_backend + "backend_refresh_secs: 0\n", "backend_refresh_secs", "must be at least 1, got 0"},
      {one_backend + "workers: -1\n", "workers", "must be at least 0, got -1"},
      {one_backend + "workers: 1000\n", "workers", "must be at most 256, got 1000"},
      // top level
      {one_backend + "bind_adr: \"x:1\"\n", "bind_adr", "unknown key"},
      {one_backend + "bind_addr: [1]\n", "bind_addr", "expected a string, got a list"},
      {one_backend + "bind_addr: null\n", "bind_addr", "expected a string, got null"},
      {one_backend + "admin_addr: \"localhost\"\n", "admin_addr", "\"localhost\" is not host:port"},
      {"- a\n- b\n", "(root)", "expected a map, got a list"},
      {one_backend + one_backend, "backends", "duplicate key"},
      // placement
      {one_backend + "placement: { strategyy: round_robin }\n", "placement.strategyy",
       "unknown key"},
      {one_backend + "placement: { strategy: fastest }\n", "placement.strategy",
       "unknown strategy \"fastest\" (expected least_loaded or round_robin)"},
      {one_backend + "placement: least_loaded\n", "placement",
       "expected a map, got \"least_loaded\""},
      {one_backend + "placement: { poll_interval_ms: 0 }\n", "placement.poll_interval_ms",
       "must be at least 1, got 0"},
      {one_backend + "placement: { ewma_alpha: 0 }\n", "placement.ewma_alpha",
       "must be greater than 0 and at most 1, got 0"},
      {one_backend + "placement: { ewma_alpha: 1.5 }\n", "placement.ewma_alpha",
       "must be greater than 0 and at most 1, got 1.5"},
      {one_backend + "placement: { ewma_alpha: high }\n", "placement.ewma_alpha",
       "expected a number, got \"high\""},
      {one_backend + "placement: { session_weight: -0.1 }\n", "placement.session_weight",
       "must not be negative, got -0.1"},
      {one_backend + "placement: { utilization_weight: .nan }\n", "placement.utilization_weight",
       "expected a number, got \".nan\""},
      {one_backend + "placement: { session_cap: 0 }\n", "placement.session_cap",
       "must be at least 1, got 0"},
      {one_backend + "placement: { session_cap: 1.5 }\n", "placement.session_cap",
       "expected an integer, got \"1.5\""},
      // affinity, limits, shutdown, logging
      {one_backend + "affinity: { session_ttl_secs: -1 }\n", "affinity.session_ttl_secs",
       "must be at least 1, got -1"},
      {one_backend + "affinity: { op_ttl_secs: 0 }\n", "affinity.op_ttl_secs",
       "must be at least 1, got 0"},
      {one_backend + "limits: { max_message_bytes: 1023 }\n", "limits.max_message_bytes",
       "must be at least 1024, got 1023"},
      {one_backend + "limits: { max_message_bytes: 2147483648 }\n", "limits.max_message_bytes",
       "must be at most 2147483647, got 2147483648"},
      {one_backend + "limits: { connect_timeout_ms: 0 }\n", "limits.connect_timeout_ms",
       "must be at least 1, got 0"},
      {one_backend + "limits: { connect_timeout_ms: 99999999999 }\n", "limits.connect_timeout_ms",
       "must be at most 2147483647, got 99999999999"},
      {one_backend + "shutdown: { deadline_secs: soon }\n", "shutdown.deadline_secs",
       "expected an integer, got \"soon\""},
      {one_backend + "shutdown: { deadline_secs: -1 }\n", "shutdown.deadline_secs",
       "must be at least 0, got -1"},
      {one_backend + "shutdown: { deadline_secs: { a: 1 } }\n", "shutdown.deadline_secs",
       "expected an integer, got a map"},
      {one_backend + "shutdown: { grace: 1 }\n", "shutdown.grace", "unknown key"},
      {one_backend + "logging: { level: verbose }\n", "logging.level",
       "unknown level \"verbose\" (expected trace, debug, info, warn, error or off)"},
      {one_backend + "logging: { format: xml }\n", "logging.format", "unknown format \"xml\" (expected json or text)"},
      {one_backend + "on_backend_lost: { action: retry }\n", "on_backend_lost.action",
       "unknown action \"retry\" (expected rebind, fail or replay)"},
      {one_backend + "on_backend_lost: { action: replay, max_journal_kib: 0 }\n", "on_backend_lost.max_journal_kib",
       "must be at least 1, got 0"},
      {one_backend + "on_backend_lost: { tenants: { a: replay, b: retry } }\n", "on_backend_lost.tenants.b",
       "unknown action \"retry\" (expected rebind, fail or replay)"},
      {one_backend + "on_backend_lost: { tenants: { a: replay } }\ncluster: { node_name: a }\n",
       "on_backend_lost.tenants",
       "replay is not available with cluster: yet (journals are kept per replica); use rebind or fail"},
      {one_backend + "on_backend_lost: { action: replay, max_artifacts_mib: 0 }\n", "on_backend_lost.max_artifacts_mib",
       "must be at least 1, got 0"},
      {one_backend + "on_backend_lost: { spool_dir: [a] }\n", "on_backend_lost.spool_dir",
       "expected a string, got a list"},
      {one_backend + "on_backend_lost: { action: replay }\ncluster: { node_name: a }\n", "on_backend_lost.action",
       "replay is not available with cluster: yet (journals are kept per replica); use rebind or fail"},
      {one_backend + "admin: { open_metrics: yes }\n", "admin.open_metrics", "expected true or false, got \"yes\""},
      // cluster
      {one_backend + "cluster: { bind_addr: \"0.0.0.0:7400\" }\n", "cluster.node_name", "required"},
      {one_backend + "cluster: { node_name: a, seeds: [\"b:7400\", \"c\"] }\n", "cluster.seeds[1]",
       "\"c\" is not host:port"},
      {one_backend + "cluster: { node_name: a, seeds: \"b:7400\" }\n", "cluster.seeds",
       "expected a list, got \"b:7400\""},
      {one_backend + "cluster: { node_name: a, bind_addr: \"0.0.0.0:99999\" }\n",
       "cluster.bind_addr", "\"0.0.0.0:99999\" is not host:port"},
      {one_backend + "cluster: { node_name: a, gossip: true }\n", "cluster.gossip", "unknown key"},
      // the data plane's bounds
      {one_backend + "limits: { buffer_mib: 8 }\n", "limits.buffer_mib", "must be at least 16, got 8"},
      {one_backend + "limits: { handshake_timeout_secs: 0 }\n", "limits.handshake_timeout_secs",
       "must be at least 1, got 0"},
      {one_backend + "limits: { sched_slice_us: 50 }\n", "limits.sched_slice_us",
       "Linux takes slices of 100 to 100000 us (0: the kernel's default), got 50"},
      {one_backend + "limits: { sched_slice_us: 200000 }\n", "limits.sched_slice_us",
       "must be at most 100000, got 200000"},
      {one_backend + "keepalive: { timeout_secs: 0 }\n", "keepalive.timeout_secs", "must be at least 1, got 0"},
      {one_backend + "keepalive: { every: 3 }\n", "keepalive.every", "unknown key"},
      // accounting
      {one_backend + "accounting: { max_tenants: 0 }\n", "accounting.max_tenants", "must be at least 1, got 0"},
      {one_backend + "accounting: { max_users: many }\n", "accounting.max_users", "expected an integer, got \"many\""},
      {one_backend + "accounting: { prometheus_users: -1 }\n", "accounting.prometheus_users",
       "must be at least 0, got -1"},
      {one_backend + "accounting: { max_users: 5, prometheus_users: 6 }\n", "accounting.prometheus_users",
       "at most accounting.max_users (5)"},
      {one_backend + "accounting: { users: top_n }\n", "accounting.users", "unknown key"},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    error e = bad(c.yaml);
    CHECK(e.field == c.field);
    CHECK(e.message == c.message);
  }
}

TEST_CASE("the enumerations read into their values", "[config]") {
  auto g = ok(one_backend + "placement: { strategy: round_robin }\non_backend_lost: { action: fail }\n"
                            "logging: { level: off, format: text }\n");
  CHECK(g.placement.strategy == placement_strategy::round_robin);
  CHECK(g.on_backend_lost.action == lost_action::fail);
  CHECK(!g.on_backend_lost.any_replay());
  auto t = ok(one_backend + "on_backend_lost: { action: fail, tenants: { gold: replay, tin: rebind } }\n");
  CHECK(t.on_backend_lost.action_for("gold") == lost_action::replay);
  CHECK(t.on_backend_lost.action_for("tin") == lost_action::rebind);
  CHECK(t.on_backend_lost.action_for("other") == lost_action::fail);
  CHECK(t.on_backend_lost.any_replay());
  CHECK(g.logging.level == log_level::off);
  CHECK(g.logging.format == scg::core::log_format::text);
  for (const auto& [name, action] : lost_action_names) {
    CHECK(from_name(lost_action_names, name) == action);
    CHECK(name_of(lost_action_names, action) == name);
  }
  CHECK_FALSE(from_name(lost_action_names, "restore"));
}

TEST_CASE("a YAML syntax error names its line", "[config]") {
  error e = bad(one_backend + "placement: { strategy: [round_robin\n");
  CHECK(e.field == "(yaml)");
  CHECK(e.message.rfind("line 3, column", 0) == 0);
  CHECK(e.to_string().rfind("(yaml): line 3", 0) == 0);
}

TEST_CASE("an error prints as field colon message", "[config]") {
  CHECK(error{"placement.strategy", "unknown key"}.to_string() ==
        "placement.strategy: unknown key");
}

TEST_CASE("loading a missing file names the path and the cause", "[config]") {
  auto r = load("/nonexistent/scg.yaml");
  REQUIRE_FALSE(r.ok());
  const error& e = r.error();
  CHECK(e.field == "(file)");
  CHECK(e.message == "cannot open \"/nonexistent/scg.yaml\": No such file or directory");
}

TEST_CASE("loading a file parses its contents", "[config]") {
  char path[] = "/tmp/scg_config_testXXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::FILE* f = fdopen(fd, "w");
  std::fputs(full_example, f);
  std::fclose(f);
  auto r = load(path);
  std::remove(path);
  REQUIRE(r.ok());
  CHECK(r.value().backends.size() == 4);
}

TEST_CASE("backends may come from Kubernetes discovery alone", "[config]") {
  gateway g = ok("backend_discovery: { type: k8s, namespace: spark, service_name: spark-connect, port: 15002,\n"
                 "  ui_url: \"http://{host}:4040\" }\n");
  CHECK(g.backends.empty());
  REQUIRE(g.backend_discovery);
  CHECK(g.backend_discovery->namespace_ == "spark");
  CHECK(g.backend_discovery->service_name == "spark-connect");
  CHECK(g.backend_discovery->token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token");
}

TEST_CASE("accounting keys have bounded defaults and take their values", "[config]") {
  auto d = ok(one_backend);
  CHECK(d.accounting.max_tenants == 200);
  CHECK(d.accounting.max_users == 1000);
  CHECK(d.accounting.prometheus_users == 0);
  auto g = ok(one_backend + "accounting: { max_tenants: 3, max_users: 10, prometheus_users: 5 }\n");
  CHECK(g.accounting.max_tenants == 3);
  CHECK(g.accounting.max_users == 10);
  CHECK(g.accounting.prometheus_users == 5);
}

TEST_CASE("the admin block has safe defaults, takes its keys and names a bad one", "[config][admin]") {
  auto d = ok(one_backend);
  CHECK(d.admin.token_file.empty());
  CHECK_FALSE(d.admin.allow_unauthenticated);
  CHECK(d.admin.open_metrics);
  CHECK_FALSE(d.admin.probe_addr);
  CHECK(d.admin.max_connections == 512);
  CHECK(d.admin.idle_timeout_ms == 5000);
  CHECK(d.admin.request_timeout_ms == 5000);
  CHECK(d.admin.max_heavy_requests == 4);
  auto g = ok(one_backend + "admin:\n  token_file: /run/a\n  read_token_file: /run/r\n  open_metrics: false\n"
                            "  probe_addr: \"0.0.0.0:9091\"\n  max_connections: 64\n  idle_timeout_ms: 1000\n"
                            "  request_timeout_ms: 2000\n  max_heavy_requests: 2\n");
  CHECK(g.admin.token_file == "/run/a");
  CHECK(g.admin.read_token_file == "/run/r");
  CHECK_FALSE(g.admin.open_metrics);
  CHECK(g.admin.probe_addr == std::optional<std::string>("0.0.0.0:9091"));
  CHECK(g.admin.max_connections == 64);
  CHECK(g.admin.idle_timeout_ms == 1000);
  CHECK(g.admin.request_timeout_ms == 2000);
  CHECK(g.admin.max_heavy_requests == 2);
  CHECK(ok(one_backend + "admin: { allow_unauthenticated: true }\n").admin.allow_unauthenticated);
  CHECK(bad(one_backend + "admin: { allow_unauthenticated: yes please }\n").field == "admin.allow_unauthenticated");
  CHECK(bad(one_backend + "admin: { allow_unauthenticated: true, token_file: /a }\n").field ==
        "admin.allow_unauthenticated");
  CHECK(bad(one_backend + "admin: { probe_addr: nowhere }\n").field == "admin.probe_addr");
  CHECK(bad(one_backend + "admin: { max_connections: 0 }\n").field == "admin.max_connections");
  CHECK(bad(one_backend + "admin: { max_heavy_requests: -1 }\n").field == "admin.max_heavy_requests");
  CHECK(bad(one_backend + "admin: { token_file: \"\" }\n").field == "admin.token_file");
  CHECK(bad(one_backend + "admin: { token: abc }\n").field == "admin.token");
}

TEST_CASE("300 mutated configuration files are each accepted or refused with a field, never a crash",
          "[config]") {
  const auto base = documented_example();
  REQUIRE(!base.empty());
  const std::string noise[] = {"", ":", "- ", "{", "}", "[", "]", "\"", "'", "-1", "99999999999999999999", "null",
                               "~", "\t", "\n  ", "&a", "*a", "!!binary", "0x", "1e309", "true", "\xff\xfe"};
  std::uint32_t seed = 18;
  auto next = [&seed] {
    seed = seed * 1664525u + 1013904223u;  // a fixed LCG: every run mutates alike
    return seed >> 8;
  };
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string y = base;
    for (int k = 0; k < 1 + static_cast<int>(next() % 4); ++k) {
      const auto at = next() % y.size();
      const auto& with = noise[next() % std::size(noise)];
      if (next() % 2) y.replace(at, std::min<std::size_t>(1 + next() % 8, y.size() - at), with);
      else y.insert(at, with);
    }
    auto r = parse(y);
    if (!r.ok()) {
      ++refused;
      CHECK_FALSE(r.error().field.empty());
      CHECK_FALSE(r.error().message.empty());
    }
  }
  CHECK(refused > 100);  // the mutations do break files; the parse survived each
}

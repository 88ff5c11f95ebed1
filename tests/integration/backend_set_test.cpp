// The backend set changes without a restart: SIGHUP reloads the list, and a
// `resolve: all` entry follows what its name resolves to.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <set>

#include "tests/integration/harness.hpp"

using namespace scg::test;

namespace {

/// The backends as /api/v1/backends lists them, by name.
std::map<std::string, nlohmann::json> listed(const gateway& gw) {
  std::map<std::string, nlohmann::json> out;
  const auto view = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
  for (const auto& b : view["backends"]) out[b["name"].get<std::string>()] = b;
  return out;
}

bool is_live(const gateway& gw, const std::string& name) {
  auto all = listed(gw);
  return all.count(name) && !all[name]["removed"].get<bool>();
}

bool is_removed(const gateway& gw, const std::string& name) {
  auto all = listed(gw);
  return all.count(name) && all[name]["removed"].get<bool>();
}

/// The backends that served `n` new sessions (named `prefix`0, `prefix`1, …).
std::multiset<std::string> place_new(const gateway& gw, const std::string& prefix, int n) {
  std::multiset<std::string> out;
  for (int i = 0; i < n; ++i) out.insert(backend_for_session(gw.grpc_port, uuid_of(prefix + std::to_string(i)), "rio"));
  return out;
}

std::string log_text(const gateway& gw) { return read_file(gw.proc.log_path()); }

}  // namespace

TEST_CASE("SIGHUP reloads the backend list - a bad file is refused and the running list kept",
          "[integration][placement][reload]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-a");
  auto b = start_fake(dir, "fake-b");
  auto c = start_fake(dir, "fake-c");
  // SIGHUP only: the file watch would reload these writes too (drain_test.cpp tests it).
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "reload: { watch_secs: 0 }\n"), "reload");
  std::string on_a;
  for (int i = 0; i < 8 && on_a.empty(); ++i)
    if (const auto s = uuid_of("old-" + std::to_string(i)); backend_for_session(gw.grpc_port, s, "rio") == "fake-a")
      on_a = s;
  REQUIRE(!on_a.empty());

  // fake-a leaves the list, fake-c joins it.
  dir.write("reload.yaml", gateway_yaml({&b, &c}));
  gw.proc.signal(SIGHUP);
  REQUIRE(eventually([&] { return is_live(gw, "fake-c") && is_removed(gw, "fake-a"); }, 5s));
  auto placed = place_new(gw, "after-", 10);
  CHECK(placed.count("fake-a") == 0);
  CHECK(placed.count("fake-c") >= 1);
  CHECK(placed.count("") == 0);
  CHECK(backend_for_session(gw.grpc_port, on_a, "rio") == "fake-a");  // its sessions carry on
  CHECK(metric_value(gw.admin_port, "scg_config_reloads_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_backend_removed{backend=\"fake-a\"}") == 1);

  // A file that does not parse changes nothing, and says why.
  dir.write("reload.yaml", gateway_yaml({&a, &b, &c}) + "placement: { strategy: fastest }\n");
  gw.proc.signal(SIGHUP);
  REQUIRE(eventually(metric(gw.admin_port, "scg_config_reload_failures_total") == 1, 5s));
  CHECK(is_removed(gw, "fake-a"));
  CHECK(is_live(gw, "fake-c"));
  CHECK(log_text(gw).find("reload_rejected") != std::string::npos);
  CHECK(log_text(gw).find("placement.strategy") != std::string::npos);
  CHECK(place_new(gw, "still-", 4).count("") == 0);

  // fake-a comes back: it takes new sessions again.
  dir.write("reload.yaml", gateway_yaml({&a, &b, &c}));
  gw.proc.signal(SIGHUP);
  REQUIRE(eventually([&] { return is_live(gw, "fake-a"); }, 5s));
  CHECK(place_new(gw, "back-", 12).count("fake-a") >= 1);
  CHECK(listed(gw).size() == 3);  // restored in place, not added twice
}

TEST_CASE("a resolve: all backend is one backend per address, following the name as it changes",
          "[integration][placement][reload]") {
  temp_dir dir;
  // Three servers on one port of three loopback addresses, one name for them
  // in a private /etc/hosts (a headless Service, as far as scg can tell).
  auto s2 = start_fake(dir, "fake-2", {}, "127.0.0.2");
  const auto ports = std::to_string(s2.grpc_port);
  const auto ui = std::to_string(s2.ui_port);
  auto same_ports = [&](const std::string& ip) {
    return std::vector<std::string>{"--listen", ip + ":" + ports, "--ui-listen", ip + ":" + ui};
  };
  auto s3 = start_fake(dir, "fake-3", same_ports("127.0.0.3"), "127.0.0.3");
  auto s4 = start_fake(dir, "fake-4", same_ports("127.0.0.4"), "127.0.0.4");
  REQUIRE(s3.grpc_port == s2.grpc_port);
  REQUIRE(s4.grpc_port == s2.grpc_port);

  auto hosts = dir.write("hosts", "127.0.0.1 localhost\n127.0.0.2 spark-pool.test\n");
  std::vector<std::string> in_ns{"/usr/bin/unshare", "-m", "sh", "-c",
                                 "mount --bind " + hosts + " /etc/hosts && exec \"$0\" \"$@\""};
  const std::string yaml = "bind_addr: \"127.0.0.1:0\"\nadmin_addr: \"127.0.0.1:0\"\nbackend_refresh_secs: 1\n"
                           "backends:\n  - { name: pool, address: \"spark-pool.test:" + ports +
                           "\", resolve: all, ui_url: \"http://{host}:" + ui + "\" }\n";
  auto gw = start_gateway(dir, yaml, "dns-pool", in_ns);
  const std::string p2 = "pool@127.0.0.2:" + ports, p3 = "pool@127.0.0.3:" + ports, p4 = "pool@127.0.0.4:" + ports;
  REQUIRE(is_live(gw, p2));
  CHECK(listed(gw)[p2]["ui_url"] == "http://127.0.0.2:" + ui);
  const std::string on_2 = uuid_of("dns-first");
  REQUIRE(backend_for_session(gw.grpc_port, on_2, "rio") == "fake-2");

  // Scaled up: the new address is found within the refresh interval.
  dir.write("hosts", "127.0.0.1 localhost\n127.0.0.2 spark-pool.test\n127.0.0.3 spark-pool.test\n");
  REQUIRE(eventually([&] { return is_live(gw, p3); }, 4s));
  auto placed = place_new(gw, "grown-", 10);
  CHECK(placed.count("fake-3") >= 1);

  // fake-2's address leaves the name: it takes no new sessions, its own carry on.
  dir.write("hosts", "127.0.0.1 localhost\n127.0.0.3 spark-pool.test\n127.0.0.4 spark-pool.test\n");
  REQUIRE(eventually([&] { return is_removed(gw, p2) && is_live(gw, p4); }, 4s));
  placed = place_new(gw, "moved-", 10);
  CHECK(placed.count("fake-2") == 0);
  CHECK(placed.count("") == 0);
  CHECK(backend_for_session(gw.grpc_port, on_2, "rio") == "fake-2");

  // The name stops resolving: nothing is dropped, the failure is counted.
  dir.write("hosts", "127.0.0.1 localhost\n");
  REQUIRE(eventually(metric(gw.admin_port, "scg_backend_resolve_failures_total") >= 1, 4s));
  CHECK(is_live(gw, p3));
  CHECK(is_live(gw, p4));
}

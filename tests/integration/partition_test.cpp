// A network partition between replicas, made with a network namespace and a
// veth link that the test creates, cuts and removes itself.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "core/rendezvous.hpp"
#include "core/session_key.hpp"
#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

std::string cluster_yaml(const std::string& node, const std::string& host, const std::vector<std::string>& seeds,
                         const std::string& extra = "") {
  std::string y = "cluster:\n  node_name: " + node + "\n  bind_addr: \"" + host + ":0\"\n  seeds: [";
  for (std::size_t i = 0; i < seeds.size(); ++i) y += (i ? ", \"" : "\"") + seeds[i] + "\"";
  return y + "]\n  sync_wait_secs: 2\n" + extra;
}

/// Config for `session` through a gateway; the backend that answered, "" on failure.
std::string backend_via(const std::string& host, int port, const std::string& session) {
  return backend_for_session(port, session, "pat", nullptr, host);
}

/// Clones `parent` to `child` through a gateway: the child lands on the parent's backend.
void clone_via(int port, const std::string& parent, const std::string& child) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  sc::CloneSessionRequest req;
  req.set_session_id(parent);
  *req.mutable_user_context() = user("pat");
  req.set_new_session_id(child);
  sc::CloneSessionResponse resp;
  REQUIRE(stub->CloneSession(&ctx, req, &resp).ok());
}

/// Sessions per backend name as a replica sees them.
std::map<std::string, long> counts(const std::string& host, int admin_port) {
  std::map<std::string, long> out;
  auto j = nlohmann::json::parse(http_get_at(host, admin_port, "/api/v1/backends").second);
  for (const auto& b : j["backends"]) out[b["name"]] = b["sessions"].get<long>();
  return out;
}

/// The backend replica `admin_port`'s data-path table binds `session` to
/// (user pat): empty when none, "?" when the listing could not be read.
std::string listed_backend(const std::string& host, int admin_port, const std::string& session) {
  auto [code, body] = http_get_at(host, admin_port, "/api/v1/sessions?tenant=default&user=pat&session=" + session);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (code != 200 || j.is_discarded()) return "?";
  for (const auto& s : j["sessions"])
    if (s["session_id"] == session) return s["backend"].get<std::string>();
  return "";
}

/// The test's network namespace and veth link, or null when it cannot be
/// made here (the test is skipped, its reason said).
std::unique_ptr<netns_link> link_or_skip() {
  if (geteuid() != 0) {
    skip_test("network namespaces need root");
    return nullptr;
  }
  auto link = std::make_unique<netns_link>();
  if (link->ok()) return link;
  link.reset();  // its namespace and veth pair go before a skip's exit
  skip_test("could not create a network namespace and veth link here");
  return nullptr;
}

/// Backends fake-a and fake-b on each side of `net`: replicas name backends
/// to each other, so both sides keep serving through a partition.
struct both_sides {
  fake_spark root_a, root_b, ns_a, ns_b;
  both_sides(const temp_dir& dir, const netns_link& net)
      : root_a(start_fake(dir, "fake-a", {}, net.host_ip())),
        root_b(start_fake(dir, "fake-b", {}, net.host_ip())),
        ns_a(start_fake(dir, "fake-a", {}, net.ns_ip(), net.inside())),
        ns_b(start_fake(dir, "fake-b", {}, net.ns_ip(), net.inside())) {}
};

/// A series of the replica whose admin plane is at `net`'s namespace address
/// and `admin_port`, read from inside the namespace (so through a cut too);
/// -1 when absent or unreadable.
long metric_inside(const netns_link& net, int admin_port, const std::string& series) {
  std::string cmd;
  for (const auto& a : net.inside()) cmd += a + " ";
  return series_value(sh_out(cmd + "curl -s --max-time 2 http://" + net.ns_ip() + ":" + std::to_string(admin_port) +
                             "/metrics"),
                      series);
}

/// A session id (user pat) whose key `node` owns among `nodes`, named from `prefix`.
std::string owned_by(const std::string& node, const std::vector<std::string>& nodes, const std::string& prefix) {
  for (int i = 0; i < 100; ++i) {
    const std::string id = uuid_of(prefix + std::to_string(i));
    if (scg::core::owner_of(scg::core::session_key{"default", "pat", id}.str(), nodes) == node) return id;
  }
  return "";
}

int up_members(const std::string& host, int admin_port) {
  auto [code, body] = http_get_at(host, admin_port, "/api/v1/cluster");
  if (code != 200) return -1;
  auto j = nlohmann::json::parse(body);
  int up = 0;
  for (const auto& m : j["members"]) up += m["status"] == "up";
  return up;
}

}  // namespace

TEST_CASE("a partitioned replica serves its side, and the cluster agrees again after the link returns",
          "[integration][cluster][partition]") {
  auto link = link_or_skip();
  if (!link) return;
  netns_link& net = *link;
  temp_dir dir;
  both_sides fakes(dir, net);
  auto &root_a = fakes.root_a, &root_b = fakes.root_b, &ns_a = fakes.ns_a, &ns_b = fakes.ns_b;

  auto root_yaml = [&](const std::string& node, const std::vector<std::string>& seeds) {
    // Clients reach root-side replicas on loopback; peers on the veth address.
    auto y = gateway_yaml({&root_a, &root_b}, cluster_yaml(node, net.host_ip(), seeds));
    return y;
  };
  auto r0 = start_gateway(dir, root_yaml("p-0", {}), "p-0");
  const std::string seed = net.host_ip() + ":" + std::to_string(r0.cluster_port);
  auto r1 = start_gateway(dir, root_yaml("p-1", {seed}), "p-1");
  auto r2 = start_gateway(dir, gateway_yaml({&ns_a, &ns_b}, cluster_yaml("p-2", net.ns_ip(), {seed}), net.ns_ip()),
                          "p-2", net.inside());
  REQUIRE(eventually([&] { return up_members("127.0.0.1", r0.admin_port) == 2 &&
                                  up_members(net.ns_ip(), r2.admin_port) == 2; },
                     10s));

  // Sessions before the partition, and a known imbalance: fake-a holds two more.
  std::map<std::string, std::string> bound;
  for (int i = 0; i < 20; ++i) {
    const auto s = uuid_of("pre-" + std::to_string(i));
    bound[s] = backend_via("127.0.0.1", r0.grpc_port, s);
  }
  std::string on_a, on_b;
  for (const auto& [s, b] : bound) (b == "fake-a" ? on_a : on_b) = s;
  REQUIRE(!on_a.empty());
  REQUIRE(!on_b.empty());
  // Placements by three owners may see each other's last binding late, so
  // the 20 need not split evenly: settle, then clone up to the imbalance.
  REQUIRE(eventually([&] {
    auto c = counts(net.ns_ip(), r2.admin_port);
    return c["fake-a"] + c["fake-b"] == 20 && c == counts("127.0.0.1", r0.admin_port);
  }, 5s));
  auto before = counts("127.0.0.1", r0.admin_port);
  INFO("fake-a " << before["fake-a"] << ", fake-b " << before["fake-b"] << " after 20 placements");
  long excess = before["fake-a"] - before["fake-b"];
  for (int i = 0; excess != 2 && i < 30; ++i, excess += excess < 2 ? 1 : -1)
    clone_via(r0.grpc_port, excess < 2 ? on_a : on_b, uuid_of("pre-clone-" + std::to_string(i)));
  REQUIRE(excess == 2);
  REQUIRE(eventually([&] {
    auto c = counts(net.ns_ip(), r2.admin_port);
    return c["fake-a"] == c["fake-b"] + 2 && c == counts("127.0.0.1", r0.admin_port);
  }, 5s));

  net.cut();
  REQUIRE(eventually([&] { return up_members("127.0.0.1", r0.admin_port) == 1 &&
                                  up_members("127.0.0.1", r1.admin_port) == 1; }, 5s));

  // The root side now makes fake-b the fuller one, then binds "split".
  for (int i = 0; i < 3; ++i) clone_via(r0.grpc_port, on_b, uuid_of("root-clone-" + std::to_string(i)));
  const std::string split = uuid_of("split");
  // Either root replica may own "split": both must see fake-b as the fuller.
  REQUIRE(eventually([&] {
    auto c0 = counts("127.0.0.1", r0.admin_port);
    auto c1 = counts("127.0.0.1", r1.admin_port);
    return c0["fake-b"] > c0["fake-a"] && c1["fake-b"] > c1["fake-a"];
  }, 3s));
  CHECK(backend_via("127.0.0.1", r0.grpc_port, split) == "fake-a");
  // The cut-off replica serves its side: an existing session and "split",
  // which it places on fake-b, still the emptier one there.
  process in_ns_old{{net.inside()[0], "netns", "exec", net.inside()[3], bin("scg-demo-client"),
                     net.ns_ip() + ":" + std::to_string(r2.grpc_port), "--session", on_a, "--user", "pat"},
                    dir.file("ns-client-old.log")};
  CHECK(in_ns_old.wait(15s) == 0);
  process in_ns{{net.inside()[0], "netns", "exec", net.inside()[3], bin("scg-demo-client"),
                 net.ns_ip() + ":" + std::to_string(r2.grpc_port), "--session", split, "--user", "pat"},
                dir.file("ns-client.log")};
  CHECK(in_ns.wait(15s) == 0);

  net.heal();
  auto t0 = std::chrono::steady_clock::now();
  // All replicas agree on every session, "split" included, within 5 s.
  auto agree = [&] {
    for (const auto& s : {split, on_a, on_b, uuid_of("root-clone-0")}) {
      auto b0 = backend_via("127.0.0.1", r0.grpc_port, s);
      if (b0.empty() || b0 != backend_via("127.0.0.1", r1.grpc_port, s) ||
          b0 != backend_via(net.ns_ip(), r2.grpc_port, s))
        return false;
    }
    return true;
  };
  CHECK(eventually(agree, 5s));
  CHECK(std::chrono::steady_clock::now() - t0 < 6s);
  CHECK(eventually([&] { return up_members("127.0.0.1", r0.admin_port) == 2; }, 3s));
  // The two decisions for "split" named different backends: counted by
  // the replicas that merged the two (the side whose handoff lands last may
  // only get its own winning entry back, and count nothing).
  CHECK(eventually(watch("scg_cluster_conflicts_total of the three replicas",
                         [&] {
                           return metric_value(r0.admin_port, "scg_cluster_conflicts_total") +
                                  metric_value(r1.admin_port, "scg_cluster_conflicts_total") +
                                  metric_value(r2.admin_port, "scg_cluster_conflicts_total", net.ns_ip());
                         }) >= 1,
                   3s));
}

TEST_CASE("a clone's binding that reaches its owner after the clone was released stays released",
          "[integration][cluster][partition]") {
  auto link = link_or_skip();
  if (!link) return;
  netns_link& net = *link;
  temp_dir dir;
  both_sides fakes(dir, net);
  auto &root_a = fakes.root_a, &root_b = fakes.root_b, &ns_a = fakes.ns_a, &ns_b = fakes.ns_b;
  // A cut shorter than the connection timeout: nobody is seen down, and what
  // was sent across waits in TCP's retransmission queue until the heal.
  const std::string slow_down = "  connection_timeout_ms: 6000\n  heartbeat_interval_ms: 500\n";
  auto owner = start_gateway(dir, gateway_yaml({&root_a, &root_b}, cluster_yaml("o-0", net.host_ip(), {}, slow_down)),
                             "o-0");
  const std::string seed = net.host_ip() + ":" + std::to_string(owner.cluster_port);
  auto cloner = start_gateway(
      dir, gateway_yaml({&ns_a, &ns_b}, cluster_yaml("o-1", net.ns_ip(), {seed}, slow_down), net.ns_ip()), "o-1",
      net.inside());
  REQUIRE(eventually([&] { return up_members("127.0.0.1", owner.admin_port) == 1 &&
                                  up_members(net.ns_ip(), cloner.admin_port) == 1; },
                     10s));
  // A clone id whose key o-0 owns: o-1 announces the clone to it (decide).
  const std::string child = owned_by("o-0", {"o-0", "o-1"}, "late-clone-");
  REQUIRE(!child.empty());
  const std::string parent = uuid_of("late-parent");
  REQUIRE(!backend_via(net.ns_ip(), cloner.grpc_port, parent).empty());

  net.cut();
  // o-1 clones: binds the child, sends its announcement toward o-0 (stuck),
  // and answers its client after the 1 s it waits for o-0.
  process clone{{net.inside()[0], "netns", "exec", net.inside()[3], bin("scg-demo-client"),
                 net.ns_ip() + ":" + std::to_string(cloner.grpc_port), "--clone", parent, child, "--user",
                 "pat"},
                dir.file("ns-clone.log")};
  // Until o-1 has bound the child and sent its announcement (one handler
  // does both and counts the clone), read inside the namespace past the cut:
  // the release must come after the binding it is to outlive.
  REQUIRE(eventually(watch("o-1's scg_router_clones_bound_total",
                           [&] { return metric_inside(net, cloner.admin_port, "scg_router_clones_bound_total"); }) == 1,
                     5s));
  // Meanwhile the child is released through o-0, which never heard of it.
  auto stub = stub_to(owner.grpc_port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  sc::ReleaseSessionRequest rel;
  rel.set_session_id(child);
  *rel.mutable_user_context() = user("pat");
  sc::ReleaseSessionResponse rel_resp;
  REQUIRE(stub->ReleaseSession(&ctx, rel, &rel_resp).ok());
  CHECK(clone.wait(10s) == 0);
  net.heal();

  // The announcement arrives after the release: o-0 does not keep it
  // (counted) instead of binding the released session again in its table.
  const auto late = [&] { return metric_value(owner.admin_port, "scg_router_late_bindings_total"); };
  REQUIRE(eventually([&] { return late() >= 1 || !listed_backend("127.0.0.1", owner.admin_port, child).empty(); },
                     15s));
  // Until a binding o-1 makes now (of a key o-1 owns, so it decides and
  // replicates it itself) has reached o-0's table: then so has the
  // replicated binding of the child that o-1 sent during the cut (one
  // cluster actor to the other, in order), and nothing of the child's is
  // still on its way to o-0.
  const std::string fence = owned_by("o-1", {"o-0", "o-1"}, "fence-");
  REQUIRE(!fence.empty());
  REQUIRE(!backend_via(net.ns_ip(), cloner.grpc_port, fence).empty());
  REQUIRE(eventually(watch("o-0's binding of the fence session",
                           [&] { return listed_backend("127.0.0.1", owner.admin_port, fence); }) != "",
                     10s));
  CHECK(listed_backend("127.0.0.1", owner.admin_port, child).empty());
  CHECK(late() == 1);
  // o-1 learns the release too: no replica binds the child.
  CHECK(eventually([&] { return listed_backend(net.ns_ip(), cloner.admin_port, child).empty(); }, 5s));
}

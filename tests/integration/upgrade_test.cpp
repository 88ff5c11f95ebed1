// Rolling upgrades (docs/cluster.md, "Protocol versions"): a cluster of the
// previous release (tests/upgrade/previous-version, built by
// scripts/build-previous.sh) replaced one replica at a time by this build
// under traffic, and back; and a peer with no protocol in common refused.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <set>
#include <atomic>
#include <csignal>
#include <mutex>
#include <random>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

const std::string previous_scg = SCG_PREVIOUS_BIN;

/// Three replicas on fixed loopback ports, each seeded with all three, so a
/// replica replaced by another binary comes back where its peers and clients
/// look for it. The configs use only keys the previous release knows.
struct rolling_cluster {
  static constexpr int n = 3;
  temp_dir dir;
  std::vector<fake_spark> fakes;
  std::vector<std::string> yaml;
  std::vector<int> grpc_ports, admin_ports;
  std::array<std::unique_ptr<gateway>, n> replicas;
  int started = 0;

  explicit rolling_cluster(const std::string& program) {
    for (const char* name : {"fake-a", "fake-b", "fake-c"}) fakes.push_back(start_fake(dir, name));
    std::vector<int> ports, cluster_ports;
    for (int tries = 0; ports.size() < std::size_t{3 * n} && tries < 100; ++tries)
      if (int p = unused_port(); std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
    REQUIRE(ports.size() == std::size_t{3 * n});
    for (int i = 0; i < n; ++i) {
      grpc_ports.push_back(ports[3 * i]);
      admin_ports.push_back(ports[3 * i + 1]);
      cluster_ports.push_back(ports[3 * i + 2]);
    }
    for (int i = 0; i < n; ++i) {
      const std::string name = "scg-" + std::to_string(i);
      std::string block = cluster_block(name, cluster_ports);
      block.replace(block.find("127.0.0.1:0"), 11, "127.0.0.1:" + std::to_string(cluster_ports[i]));
      auto y = gateway_yaml({&fakes[0], &fakes[1], &fakes[2]}, "shutdown: { deadline_secs: 5 }\n" + block);
      y.replace(y.find("127.0.0.1:0"), 11, "127.0.0.1:" + std::to_string(grpc_ports[i]));
      y.replace(y.find("127.0.0.1:0"), 11, "127.0.0.1:" + std::to_string(admin_ports[i]));
      yaml.push_back(y);
    }
    for (int i = 0; i < n; ++i) start(i, program);
  }

  /// Starts replica `i` from `program` (its ports and node name as always).
  void start(int i, const std::string& program) {
    const auto tag = "scg-" + std::to_string(i) + "." + std::to_string(started++);
    replicas[i] = std::make_unique<gateway>(start_gateway(dir, yaml[i], tag, {}, program));
  }

  /// The cluster view of replica `i`, null when unreadable.
  nlohmann::json view(int i) const {
    auto [code, body] = http_get(admin_ports[i], "/api/v1/cluster");
    auto j = nlohmann::json::parse(body, nullptr, false);
    return code == 200 && !j.is_discarded() ? j : nlohmann::json();
  }

  /// Every replica ready and seeing the other two up.
  bool meshed() const {
    for (int i = 0; i < n; ++i) {
      if (http_get(admin_ports[i], "/readyz").first != 200) return false;
      auto j = view(i);
      if (j.is_null()) return false;
      int up = 0;
      for (const auto& m : j["members"]) up += m["status"] == "up";
      if (up != n - 1) return false;
    }
    return true;
  }

  /// The protocol replica `i` shows for member `name` (-1 when not listed).
  int protocol_of(int i, const std::string& name) const {
    auto j = view(i);
    if (j.is_null()) return -1;
    for (const auto& m : j["members"])
      if (m["name"] == name && m.contains("protocol")) return m["protocol"].get<int>();
    return -1;
  }
};

/// Sessions through random live replicas while the test replaces replicas: new
/// sessions, repeated calls on existing ones (with the server-side id the
/// client observed, so a misroute is SESSION_CHANGED), and executions cut
/// after two responses and reattached through another replica. A replica is
/// taken out of the choice before it is stopped and put back once ready.
class traffic {
 public:
  explicit traffic(const std::vector<int>& ports) : ports_(ports) {
    for (auto& l : live_) l = true;
    for (auto& f : inflight_) f = 0;
  }

  void start(int threads) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { run(t); });
  }
  void stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  // A failed REQUIRE unwinds past stop(): joining here keeps std::terminate
  // (and the replicas it would leave running) away.
  ~traffic() { stop(); }

  /// Takes replica `i` out of the choice and waits for its calls to end.
  bool take_out(int i) {
    live_[i] = false;
    return eventually([&] { return inflight_[i].load() == 0; }, 20s);
  }
  void put_back(int i) { live_[i] = true; }

  struct session {
    std::string backend;
    std::string server_side_id;
  };

  std::atomic<int> calls{0}, failures{0}, changed{0}, moved{0}, executions{0}, reattaches{0};
  /// While a 0.1.0 replica drains beside another 0.1.0 one, a new session at
  /// that other one whose key the draining one owns fails UNAVAILABLE ("the
  /// owner replica ... found no backend"): 0.1.0's documented limit (0.2.0
  /// owners decide while draining, 0.2.0 askers decide when refused). Counted
  /// apart, only in that window.
  std::atomic<bool> tolerate_owner_drain{false};
  std::atomic<int> owner_drain_failures{0};
  std::mutex mu;
  std::vector<std::string> first_failures;  // up to 10, for the test's log
  std::map<std::string, session> sessions;  // every session and where it was placed

 private:
  /// A live replica, held until release(): its index.
  int acquire(std::mt19937& rng, int other_than = -1) {
    for (int tries = 0; tries < 1000; ++tries) {
      const int i = static_cast<int>(rng() % ports_.size());
      if (i == other_than) continue;
      ++inflight_[i];
      if (live_[i]) return i;
      --inflight_[i];
    }
    return -1;
  }
  void release(int i) { --inflight_[i]; }

  void fail(const std::string& what) {
    ++failures;
    std::lock_guard lock{mu};
    if (first_failures.size() < 10) first_failures.push_back(what);
  }

  /// One Config of `id` through `port`; checks the backend and the server-side id.
  void config(int port, const std::string& id, session* known) {
    auto stub = stub_to(port);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    sc::ConfigRequest req;
    req.set_session_id(id);
    *req.mutable_user_context() = user("rolling");
    if (known) req.set_client_observed_server_side_session_id(known->server_side_id);
    sc::ConfigResponse resp;
    auto s = stub->Config(&ctx, req, &resp);
    ++calls;
    if (!s.ok()) {
      if (s.error_message().find("SESSION_CHANGED") != std::string::npos) ++changed;
      if (!known && tolerate_owner_drain && s.error_code() == grpc::StatusCode::UNAVAILABLE &&
          s.error_message().find("found no backend for a new session") != std::string::npos) {
        ++owner_drain_failures;
        return;
      }
      return fail("Config " + id + " at " + std::to_string(port) + ": " + s.error_message());
    }
    const auto backend = header(ctx, "x-fake-backend");
    if (!known) {
      std::lock_guard lock{mu};
      sessions[id] = {backend, resp.server_side_session_id()};
    } else if (backend != known->backend || resp.server_side_session_id() != known->server_side_id) {
      ++moved;
      fail("Config " + id + " answered by " + backend + ", placed on " + known->backend);
    }
  }

  /// An execution of `id` cut after two of six responses, reattached stream
  /// after stream through other replicas until complete.
  void execute_and_reattach(std::mt19937& rng, int first, const std::string& id, const session& known,
                            const std::string& op) {
    std::string last;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      ctx.AddMetadata("x-fake-responses", "6");
      ctx.AddMetadata("x-fake-stream-max-responses", "2");
      // Reattachable (execute's default, as PySpark asks): only such a stream is cut.
      auto req = execute(id, "rolling", op);
      req.set_client_observed_server_side_session_id(known.server_side_id);
      auto reader = stub_to(ports_[first])->ExecutePlan(&ctx, req);
      sc::ExecutePlanResponse r;
      while (reader->Read(&r)) last = r.response_id();
      auto s = reader->Finish();
      ++calls;
      ++executions;
      if (!s.ok()) {
        if (s.error_message().find("SESSION_CHANGED") != std::string::npos) ++changed;
        return fail("ExecutePlan " + op + ": " + s.error_message());
      }
      if (header(ctx, "x-fake-backend") != known.backend) {
        ++moved;
        return fail("ExecutePlan " + op + " answered by " + header(ctx, "x-fake-backend"));
      }
    }
    bool complete = false;
    for (int stream = 0; stream < 6 && !complete; ++stream) {
      const int i = acquire(rng, first);
      if (i < 0) return fail("no live replica for a reattach");
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      auto reader = stub_to(ports_[i])->ReattachExecute(&ctx, reattach(id, "rolling", op, last));
      sc::ExecutePlanResponse r;
      while (reader->Read(&r)) {
        last = r.response_id();
        complete = complete || r.has_result_complete();
      }
      auto s = reader->Finish();
      release(i);
      ++calls;
      ++reattaches;
      if (!s.ok()) return fail("ReattachExecute " + op + " at " + std::to_string(ports_[i]) + ": " + s.error_message());
      if (header(ctx, "x-fake-backend") != known.backend) {
        ++moved;
        return fail("ReattachExecute " + op + " answered by " + header(ctx, "x-fake-backend"));
      }
    }
    if (!complete) fail("ReattachExecute " + op + ": no result_complete after 6 streams");
  }

  void run(int t) {
    std::mt19937 rng(1000 + t);
    std::vector<std::string> mine;
    // Bounded in count and time, whatever the roller does.
    const auto until = std::chrono::steady_clock::now() + 240s;
    for (int n = 0; n < 20000 && !stop_ && std::chrono::steady_clock::now() < until; ++n) {
      const int i = acquire(rng);
      if (i < 0) {
        fail("no live replica");
        continue;
      }
      const auto dice = rng() % 100;
      if (mine.empty() || dice < 25) {
        mine.push_back(uuid_of("roll-" + std::to_string(t) + "-" + std::to_string(n)));
        config(ports_[i], mine.back(), nullptr);
      } else {
        const auto& id = mine[rng() % mine.size()];
        session known;
        {
          std::lock_guard lock{mu};
          auto it = sessions.find(id);
          if (it == sessions.end()) {  // its first call failed
            release(i);
            continue;
          }
          known = it->second;
        }
        if (dice < 92)
          config(ports_[i], id, &known);
        else
          execute_and_reattach(rng, i, id, known, uuid_of("op-" + id + "-" + std::to_string(n)));
      }
      release(i);
    }
  }

  std::vector<int> ports_;
  std::array<std::atomic<bool>, 3> live_;
  std::array<std::atomic<int>, 3> inflight_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// Rolls every replica of `c` to `to`, one at a time under traffic; `check`
/// runs once the first rolled replica is back and the cluster is mixed.
/// `old_drains[i]`: replica i drains as 0.1.0 beside another 0.1.0 replica.
template <class Check>
void roll(rolling_cluster& c, traffic& load, const std::string& to, std::array<bool, 3> old_drains, Check check) {
  for (int i = 0; i < rolling_cluster::n; ++i) {
    INFO("rolling scg-" << i);
    std::this_thread::sleep_for(1s);  // traffic on the cluster as it is
    load.tolerate_owner_drain = old_drains[i];
    REQUIRE(load.take_out(i));
    c.replicas[i]->proc.signal(SIGTERM);
    CHECK(c.replicas[i]->proc.wait(20s) == 0);
    c.replicas[i].reset();
    c.start(i, to);
    REQUIRE(eventually([&] { return c.meshed(); }, 20s));
    load.put_back(i);
    load.tolerate_owner_drain = false;
    if (i == 0) check();
  }
  std::this_thread::sleep_for(1s);
}

/// The checks after a roll: no call failed, no session moved or changed.
void check_traffic(traffic& load) {
  std::lock_guard lock{load.mu};
  std::string failed;
  for (const auto& f : load.first_failures) failed += "\n  " + f;
  INFO("first failures:" << failed);
  INFO(load.calls << " calls, " << load.sessions.size() << " sessions, " << load.executions << " executions, "
                  << load.reattaches << " reattaches, " << load.owner_drain_failures
                  << " new sessions refused by a draining 0.1.0 owner");
  CHECK(load.calls > 500);
  CHECK(load.executions > 20);
  CHECK(load.changed == 0);
  CHECK(load.moved == 0);
  CHECK(load.failures == 0);
  CHECK(load.owner_drain_failures <= 20);
}

/// Every session still answered by the backend it was first placed on (each
/// asked at one replica, in turn).
void check_bindings(rolling_cluster& c, traffic& load) {
  std::lock_guard lock{load.mu};
  std::set<std::string> used;
  int wrong = 0, k = 0;
  std::string which;  // the first few, for the replicas' logs (session.create twice)
  for (const auto& [id, s] : load.sessions) {
    used.insert(s.backend);
    const int i = k++ % rolling_cluster::n;
    const auto now = backend_for_session(c.grpc_ports[i], id, "rolling");
    if (now == s.backend) continue;
    if (++wrong <= 5) which += "\n  " + id + " placed on " + s.backend + ", scg-" + std::to_string(i) + " says " + now;
  }
  INFO("sessions on another backend now:" << which);
  CHECK(wrong == 0);
  CHECK(used.size() == 3);
}

bool previous_built() {
  if (access(previous_scg.c_str(), X_OK) == 0) return true;
  FAIL("the previous release's scg is missing at " << previous_scg << ": run scripts/build-previous.sh");
  return false;
}

}  // namespace

TEST_CASE("a cluster of the previous release rolled to this one under traffic loses and moves no session",
          "[.][upgrade][integration][cluster]") {
  if (!previous_built()) return;
  rolling_cluster c(previous_scg);
  REQUIRE(eventually([&] { return c.meshed(); }, 20s));
  traffic load(c.grpc_ports);
  load.start(4);
  roll(c, load, bin("scg"), {true, true, false}, [&] {
    // Mixed: the new replica shows the old peers as protocol 1 with no version,
    // the old ones list it as an up member (they show no protocols).
    CHECK(c.protocol_of(0, "scg-1") == 1);
    CHECK(c.protocol_of(0, "scg-2") == 1);
    auto self = c.view(0)["members"][0];
    CHECK(self["protocol"] == 4);
    CHECK(self["scg_version"] == SCG_VERSION);
    const auto view = c.view(0);  // held: a range-for over a temporary's member dangles
    for (const auto& m : view["members"])
      if (m["name"] != "scg-0") CHECK(m["scg_version"].is_null());
  });
  load.stop();
  check_traffic(load);
  check_bindings(c, load);
  // All on this build: every member protocol 4, with its version.
  for (int i = 0; i < rolling_cluster::n; ++i) {
    const auto view = c.view(i);
    for (const auto& m : view["members"]) {
      CHECK(m["status"] != "down");
      CHECK(m["protocol"] == 4);
      CHECK(m["scg_version"] == SCG_VERSION);
    }
  }
  for (int i = 0; i < rolling_cluster::n; ++i)
    CHECK(metric_value(c.admin_ports[i], "scg_cluster_protocol_refused_total") == 0);
}

TEST_CASE("a cluster of this release rolled back to the previous one under traffic loses and moves no session",
          "[.][upgrade][integration][cluster]") {
  if (!previous_built()) return;
  rolling_cluster c(bin("scg"));
  REQUIRE(eventually([&] { return c.meshed(); }, 20s));
  traffic load(c.grpc_ports);
  load.start(4);
  roll(c, load, previous_scg, {false, false, false}, [&] {
    // Mixed: the new replicas show the rolled-back one as protocol 1.
    CHECK(c.protocol_of(1, "scg-0") == 1);
    CHECK(c.protocol_of(2, "scg-0") == 1);
    CHECK(c.protocol_of(1, "scg-2") == 4);
  });
  load.stop();
  check_traffic(load);
  check_bindings(c, load);
}

TEST_CASE("a peer that speaks no protocol version in common is refused on both sides and counted once",
          "[integration][cluster]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-version");
  auto first = start_gateway(dir, gateway_yaml({&a}, cluster_block("v-now", {})), "v-now");
  // Test-only: --test-cluster-protocol makes a replica announce protocol 9 alone (no contract).
  auto future = start_gateway(dir, gateway_yaml({&a}, cluster_block("v-future", {first.cluster_port})), "v-future",
                              scg_with_flags("--test-cluster-protocol 9"));
  CHECK(eventually(metric(first.admin_port, "scg_cluster_protocol_refused_total") == 1, 5s));
  CHECK(eventually(metric(future.admin_port, "scg_cluster_protocol_refused_total") == 1, 5s));
  std::this_thread::sleep_for(2s);  // more dial rounds: still counted once, still no member
  CHECK(metric_value(first.admin_port, "scg_cluster_protocol_refused_total") == 1);
  CHECK(metric_value(future.admin_port, "scg_cluster_protocol_refused_total") == 1);
  for (int port : {first.admin_port, future.admin_port}) {
    auto j = nlohmann::json::parse(http_get(port, "/api/v1/cluster").second);
    CHECK(j["members"].size() == 1);  // itself only
  }
  // One log line, naming both sides' versions.
  std::ifstream log(first.proc.log_path());
  int lines = 0;
  for (std::string line; std::getline(log, line);) {
    if (line.find("\"event\":\"peer_refused\"") == std::string::npos) continue;
    ++lines;
    CHECK(line.find("\"node\":\"v-future\"") != std::string::npos);
    CHECK(line.find("\"peer_protocols\":\"9-9\"") != std::string::npos);
    CHECK(line.find("\"protocols\":\"1-4\"") != std::string::npos);
  }
  CHECK(lines == 1);
}

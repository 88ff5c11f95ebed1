// What operators see: the admin API's listings and events, the status page in
// a real browser, the metrics as Prometheus and Grafana read them.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>

#include <httplib.h>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
namespace fs = std::filesystem;
using namespace scg::test;

namespace {

const std::string chromium = "/usr/bin/chromium";
const std::string promtool = "/usr/bin/promtool";
const std::string prometheus = "/usr/bin/prometheus";

/// Fails the test, naming the Debian package, when a tool is missing.
void require_tool(const std::string& path, const std::string& package) {
  if (!fs::exists(path))
    FAIL(path << " is missing: install the Debian package " << package
              << " (apt-get install -y " << package << "; scripts/setup.sh does)");
}

/// A free TCP port on loopback for a server that cannot be told to pick one.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

/// Runs `argv` to its end, bounded by `timeout` (killed by pid past it);
/// {exit code or nullopt on time-out, everything it printed}.
std::pair<std::optional<int>, std::string> run(const temp_dir& dir, const std::vector<std::string>& argv,
                                               const std::string& tag, std::chrono::milliseconds timeout) {
  const auto log = dir.file(tag + ".log");
  std::optional<int> rc;
  {
    process p{argv, log};
    rc = p.wait(timeout);
  }  // a process still running is SIGKILLed here
  return {rc, read_file(log)};
}

/// Headless Chromium on `url` with `args`; a fresh profile per run, so runs
/// never share a profile lock.
std::pair<std::optional<int>, std::string> run_chromium(const temp_dir& dir, const std::string& tag,
                                                        std::vector<std::string> args, const std::string& url) {
  std::vector<std::string> argv{chromium,
                                "--headless",
                                "--no-sandbox",
                                "--disable-gpu",
                                "--disable-dev-shm-usage",
                                "--no-first-run",
                                "--user-data-dir=" + dir.file("chromium-" + tag),
                                "--virtual-time-budget=5000"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(url);
  return run(dir, argv, tag, 60s);
}

/// Starts an ExecutePlan with `op_id` and reads it to the end.
grpc::Status execute(int port, const std::string& session, const std::string& user_id, const std::string& op_id) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto reader = stub->ExecutePlan(&ctx, scg::test::execute(session, user_id, op_id));
  sc::ExecutePlanResponse r;
  while (reader->Read(&r)) {
  }
  return reader->Finish();
}

nlohmann::json get_json(int port, const std::string& path) {
  auto [code, body] = http_get(port, path);
  INFO(path << " -> " << code << " " << body);
  REQUIRE(code == 200);
  return nlohmann::json::parse(body);
}

/// The names of the metric families a /metrics text declares (# TYPE lines).
std::set<std::string> exported_metric_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("# TYPE ", 0) == 0) names.insert(line.substr(7, line.find(' ', 7) - 7));
  return names;
}

/// Every PromQL string of a Grafana dashboard: targets' `expr` and the
/// templating variables' `query`, wherever panels nest.
void collect_queries(const nlohmann::json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if ((it.key() == "expr" || it.key() == "query") && it.value().is_string())
        out.push_back(it.value().get<std::string>());
      else
        collect_queries(it.value(), out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_queries(v, out);
  }
}

/// One replica in front of fake-a and fake-b, with traffic so that every
/// kind of series has a sample.
struct one_replica {
  temp_dir dir;
  fake_spark a = start_fake(dir, "fake-a");
  fake_spark b = start_fake(dir, "fake-b");
  gateway gw = start_gateway(dir, gateway_yaml({&a, &b}));
};

}  // namespace

TEST_CASE("sessions and operations list by page with filters and a cursor", "[integration][observability]") {
  one_replica env;
  const int port = env.gw.grpc_port, admin = env.gw.admin_port;
  auto ann = [](int i) { return uuid_of("ann-" + std::to_string(i)); };
  auto bob = [](int i) { return uuid_of("bob-" + std::to_string(i)); };
  // Listings sort operations by id: take the three ids in that order, so
  // ann's two come first, op_ann_1 before op_ann_2.
  std::vector<std::string> op_ids{uuid_of("op-ann-1"), uuid_of("op-ann-2"), uuid_of("op-bob-1")};
  std::sort(op_ids.begin(), op_ids.end());
  const std::string op_ann_1 = op_ids[0], op_ann_2 = op_ids[1], op_bob_1 = op_ids[2];
  for (int i = 0; i < 5; ++i) REQUIRE(!backend_for_session(port, ann(i), "ann").empty());
  for (int i = 0; i < 3; ++i) REQUIRE(!backend_for_session(port, bob(i), "bob").empty());
  const auto ann0_backend = backend_for_session(port, ann(0), "ann");
  REQUIRE(execute(port, ann(0), "ann", op_ann_1).ok());
  REQUIRE(execute(port, ann(0), "ann", op_ann_2).ok());
  REQUIRE(execute(port, bob(0), "bob", op_bob_1).ok());

  SECTION("pages of 3 visit all 8 sessions once and end with a null next") {
    std::set<std::string> seen;
    std::string path = "/api/v1/sessions?limit=3";
    int pages = 0;
    for (;;) {
      auto page = get_json(admin, path);
      CHECK(page["total"] == 8);
      CHECK(page["sessions"].size() <= 3);
      for (const auto& s : page["sessions"]) CHECK(seen.insert(s["session_id"].get<std::string>()).second);
      ++pages;
      if (page["next"].is_null()) break;
      REQUIRE(pages < 10);
      path = "/api/v1/sessions?limit=3&after=" + page["next"].get<std::string>();
    }
    CHECK(pages == 3);
    CHECK(seen.size() == 8);
  }

  SECTION("each session shows its user, tenant, backend, age and operation count") {
    auto all = get_json(admin, "/api/v1/sessions");
    REQUIRE(all["sessions"].size() == 8);
    for (const auto& s : all["sessions"]) {
      CHECK(s["tenant"].is_string());
      CHECK(s["last_seen_ms_ago"].get<long>() >= 0);
      if (s["session_id"] == ann(0)) {
        CHECK(s["user_id"] == "ann");
        CHECK(s["backend"] == ann0_backend);
        CHECK(s["operations"] == 2);
      }
    }
  }

  SECTION("filters by user, backend and tenant") {
    auto bobs = get_json(admin, "/api/v1/sessions?user=bob");
    CHECK(bobs["sessions"].size() == 3);
    for (const auto& s : bobs["sessions"]) CHECK(s["user_id"] == "bob");
    auto on_backend = get_json(admin, "/api/v1/sessions?backend=" + ann0_backend);
    CHECK(on_backend["sessions"].size() >= 1);
    for (const auto& s : on_backend["sessions"]) CHECK(s["backend"] == ann0_backend);
    const auto tenant = bobs["sessions"][0]["tenant"].get<std::string>();
    CHECK(get_json(admin, "/api/v1/sessions?tenant=" + tenant)["sessions"].size() == 8);
    CHECK(get_json(admin, "/api/v1/sessions?tenant=nobody")["sessions"].empty());
    CHECK(get_json(admin, "/api/v1/sessions?backend=no-such")["sessions"].empty());
  }

  SECTION("several sessions named whole are looked up in one request") {
    const auto tenant = get_json(admin, "/api/v1/sessions?user=bob")["sessions"][0]["tenant"].get<std::string>();
    auto key = [&](const std::string& user, const std::string& session) {
      return "key=" + tenant + "/" + user + "/" + session;
    };
    auto two = get_json(admin, "/api/v1/sessions?" + key("bob", bob(2)) + "&" + key("ann", ann(0)) + "&" +
                                   key("ann", uuid_of("nobody-9")));
    REQUIRE(two["sessions"].size() == 2);  // in key order; the unknown one is absent
    CHECK(two["sessions"][0]["session_id"] == ann(0));
    CHECK(two["sessions"][0]["backend"] == ann0_backend);
    CHECK(two["sessions"][0]["operations"] == 2);
    CHECK(two["sessions"][1]["session_id"] == bob(2));
    // bob's session is not found under ann; a key filters operations too.
    CHECK(get_json(admin, "/api/v1/sessions?" + key("ann", bob(1)) + "&" + key("ann", ann(1)))["sessions"].size() ==
          1);
    CHECK(get_json(admin, "/api/v1/operations?" + key("ann", ann(0)) + "&" + key("bob", bob(1)))["operations"]
              .size() == 2);
    auto [code, body] = http_get(admin, "/api/v1/sessions?key=" + tenant + "/" + ann(0));
    CHECK(code == 400);
    CHECK(body.find("TENANT/USER/SESSION") != std::string::npos);
  }

  SECTION("operations list by session and backend, and page") {
    auto ann0 = get_json(admin, "/api/v1/operations?session=" + ann(0));
    REQUIRE(ann0["operations"].size() == 2);
    CHECK(ann0["operations"][0]["operation_id"] == op_ann_1);
    CHECK(ann0["operations"][1]["operation_id"] == op_ann_2);
    for (const auto& o : ann0["operations"]) {
      CHECK(o["session_id"] == ann(0));
      CHECK(o["user_id"] == "ann");
      CHECK(o["backend"] == ann0_backend);
    }
    auto first = get_json(admin, "/api/v1/operations?limit=1");
    CHECK(first["total"] == 3);
    REQUIRE(first["next"].is_string());
    auto second = get_json(admin, "/api/v1/operations?limit=1&after=" + first["next"].get<std::string>());
    CHECK(second["operations"][0]["operation_id"] == op_ann_2);
    const auto on_ann0_backend = get_json(admin, "/api/v1/operations?backend=" + ann0_backend);  // outlives the loop
    for (const auto& o : on_ann0_backend["operations"])
      CHECK(o["backend"] == ann0_backend);
  }

  SECTION("a bad limit or cursor is a 400 naming the parameter; a huge limit is capped") {
    auto [c1, b1] = http_get(admin, "/api/v1/sessions?limit=many");
    CHECK(c1 == 400);
    CHECK(b1.find("limit") != std::string::npos);
    auto [c2, b2] = http_get(admin, "/api/v1/operations?after=not-hex");
    CHECK(c2 == 400);
    CHECK(b2.find("after") != std::string::npos);
    CHECK(get_json(admin, "/api/v1/sessions?limit=100000")["sessions"].size() == 8);
  }
}

TEST_CASE("a drain and an undrain appear in the event log", "[integration][observability]") {
  one_replica env;
  const int admin = env.gw.admin_port;
  REQUIRE(http_post(admin, "/api/v1/backends/fake-b/drain", "").first == 200);
  REQUIRE(http_post(admin, "/api/v1/backends/fake-b/undrain", "").first == 200);
  auto events = get_json(admin, "/api/v1/events")["events"];
  REQUIRE(events.size() >= 2);
  const auto& drain = events[events.size() - 2];
  const auto& undrain = events[events.size() - 1];
  CHECK(drain["kind"] == "drain");
  CHECK(drain["text"].get<std::string>().find("fake-b") != std::string::npos);
  CHECK(undrain["kind"] == "undrain");
  CHECK(undrain["seq"].get<long>() == drain["seq"].get<long>() + 1);
  CHECK(get_json(admin, "/api/v1/events?after=" + std::to_string(drain["seq"].get<long>()))["events"].size() == 1);
}

TEST_CASE("the status page of a 3-replica cluster shows every member and backend in a real browser",
          "[integration][observability][browser]") {
  require_tool(chromium, "chromium");
  // Authentication on: the page gets the read token once (#token=, kept in
  // sessionStorage) and sends it as a Bearer header on every API call.
  temp_dir secrets;
  const std::string read_token = "status-page-read-token", admin_token = "status-page-admin-token";
  const auto read_token_file = secrets.write("read.token", read_token + "\n");
  const auto admin_file = secrets.write("admin.token", admin_token + "\n");
  admin_token_scope harness_token(read_token);  // for cluster_env's own waits
  cluster_env env(3, "admin: { token_file: " + admin_file + ", read_token_file: " + read_token_file + " }\n");
  const int admin = env.replicas[0]->admin_port;
  httplib::Client c("127.0.0.1", admin);
  auto drained = c.Post("/api/v1/backends/fake-c/drain", {{"Authorization", "Bearer " + admin_token}}, "",
                        "application/json");
  REQUIRE(drained);
  REQUIRE(drained->status == 200);
  const std::string url = "http://127.0.0.1:" + std::to_string(admin) + "/";

  auto page = c.Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->get_header_value("Content-Type").rfind("text/html", 0) == 0);
  CHECK(page->get_header_value("Content-Security-Policy") == "default-src 'self'");
  CHECK(http_get(admin, "/ui/app.js").first == 200);
  CHECK(http_get(admin, "/ui/nope.js").first == 404);

  {
    // Without the token the page shows no data, only the token form and why.
    auto [rc, dom] = run_chromium(env.dir, "no-token", {"--dump-dom"}, url);
    INFO("chromium output:\n" << dom);
    REQUIRE(rc == 0);
    CHECK(dom.find("admin token required") != std::string::npos);
    CHECK(dom.find("<td>fake-a</td>") == std::string::npos);
    CHECK(dom.find("<td>scg-0</td>") == std::string::npos);
  }
  const auto url_with_token = url + "#token=" + read_token;
  auto [rc, dom] = run_chromium(env.dir, "dump", {"--dump-dom"}, url_with_token);
  INFO("chromium output:\n" << dom);
  REQUIRE(rc == 0);
  // Names inside table cells: only the page's script puts them there, from
  // the API, so finding them proves the script ran.
  for (const char* member : {"scg-0", "scg-1", "scg-2"}) CHECK(dom.find(std::string("<td>") + member + "</td>") != std::string::npos);
  for (const char* backend : {"fake-a", "fake-b", "fake-c"})
    CHECK(dom.find(std::string("<td>") + backend + "</td>") != std::string::npos);
  CHECK(dom.find(">draining</td>") != std::string::npos);
  CHECK(dom.find("backend fake-c drained") != std::string::npos);
  CHECK(dom.find("cannot reach the admin API") == std::string::npos);
  CHECK(dom.find("admin token required") == std::string::npos);
  CHECK(read_file(env.replicas[0]->proc.log_path()).find(read_token) == std::string::npos);

  const auto artifacts = fs::path(SCG_BIN_DIR) / "artifacts";
  fs::create_directories(artifacts);
  const auto png = (artifacts / "status-page.png").string();
  fs::remove(png);
  auto [shot_rc, shot_log] =
      run_chromium(env.dir, "shot", {"--screenshot=" + png, "--window-size=1280,900"}, url_with_token);
  INFO("chromium output:\n" << shot_log);
  REQUIRE(shot_rc == 0);
  REQUIRE(fs::exists(png));
  CHECK(read_file(png).rfind("\x89PNG", 0) == 0);
  std::cout << "status page screenshot: " << png << std::endl;
}

TEST_CASE("promtool accepts the metrics of a running replica", "[integration][observability][prometheus]") {
  require_tool(promtool, "prometheus");
  one_replica env;
  REQUIRE(!backend_for_session(env.gw.grpc_port, uuid_of("metrics-1"), "mia").empty());
  REQUIRE(execute(env.gw.grpc_port, uuid_of("metrics-1"), "mia", uuid_of("op-metrics-1")).ok());
  auto [code, text] = http_get(env.gw.admin_port, "/metrics");
  REQUIRE(code == 200);
  const auto file = env.dir.write("metrics.txt", text);
  // promtool reads the metrics on stdin.
  auto [rc, out] = run(env.dir, {"/bin/sh", "-c", "exec " + promtool + " check metrics < " + file}, "promtool", 30s);
  INFO("promtool:\n" << out);
  CHECK(rc == 0);
}

TEST_CASE("a real Prometheus scrapes a replica and answers a query on an scg metric",
          "[integration][observability][prometheus]") {
  require_tool(prometheus, "prometheus");
  one_replica env;
  REQUIRE(!backend_for_session(env.gw.grpc_port, uuid_of("scraped-1"), "sam").empty());
  const int prom_port = free_port();
  const auto config = env.dir.write(
      "prometheus.yml", "global: { scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }\n"
                        "scrape_configs:\n"
                        "  - job_name: scg\n"
                        "    static_configs: [ { targets: [\"127.0.0.1:" +
                            std::to_string(env.gw.admin_port) + "\"] } ]\n");
  process prom{{prometheus, "--config.file=" + config, "--storage.tsdb.path=" + env.dir.file("prom-data"),
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
               env.dir.file("prometheus.log")};
  nlohmann::json result;
  bool sampled = eventually(
      [&] {
        auto [code, body] = http_get(prom_port, "/api/v1/query?query=scg_sessions_active");
        if (code != 200) return false;
        result = nlohmann::json::parse(body, nullptr, false);
        return !result.is_discarded() && result["status"] == "success" && !result["data"]["result"].empty();
      },
      20s);
  INFO("last answer: " << result.dump() << "\nprometheus log:\n" << read_file(env.dir.file("prometheus.log")));
  REQUIRE(sampled);
  CHECK(result["data"]["result"][0]["value"][1] == "1");
}

TEST_CASE("the Grafana dashboard parses and queries only metrics the binary exports",
          "[integration][observability][grafana]") {
  // The source tree, from this file's path: tests/integration/ is two levels down.
  const auto dashboard_path = fs::path(__FILE__).parent_path().parent_path().parent_path() / "deploy" /
                              "grafana" / "scg-dashboard.json";
  auto dashboard = nlohmann::json::parse(read_file(dashboard_path.string()), nullptr, false);
  REQUIRE_FALSE(dashboard.is_discarded());

  one_replica env;
  auto [code, text] = http_get(env.gw.admin_port, "/metrics");
  REQUIRE(code == 200);
  const auto exported = exported_metric_names(text);
  REQUIRE(exported.count("scg_sessions_active"));

  std::vector<std::string> queries;
  collect_queries(dashboard, queries);
  CHECK(queries.size() >= 10);
  const std::regex metric_name(R"(\bscg_[a-z0-9_]+)");
  std::set<std::string> used;
  for (const auto& q : queries)
    for (std::sregex_iterator it(q.begin(), q.end(), metric_name), end; it != end; ++it) used.insert(it->str());
  CHECK(used.size() >= 10);
  for (const auto& name : used) {
    INFO("the dashboard queries " << name);
    CHECK(exported.count(name) == 1);
  }
  // The datasource is chosen on import, never hard-wired.
  CHECK(dashboard.dump().find("${DS_PROMETHEUS}") != std::string::npos);
}

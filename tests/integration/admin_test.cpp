// The admin plane under a careless or hostile neighbour: probes that idle,
// slow and heavy connections cannot starve, tokens by role, no cross-site
// requests, clean answers to malformed requests.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include <httplib.h>

#include "tests/integration/harness.hpp"

using namespace scg::test;

namespace {

const std::string admin_token = "adm-0123456789abcdef";
const std::string read_token = "read-fedcba9876543210";

/// A replica with an admin and a read token (files in its directory) and
/// `more` lines of the admin block.
struct guarded_replica {
  temp_dir dir;
  fake_spark a = start_fake(dir, "fake-a");
  fake_spark b = start_fake(dir, "fake-b");
  std::string admin_file = dir.write("admin.token", admin_token + "\n");
  std::string read_file = dir.write("read.token", read_token + "\n");
  gateway gw;
  explicit guarded_replica(const std::string& more = "")
      : gw(start_gateway(dir, gateway_yaml({&a, &b}, "admin:\n  token_file: " + admin_file +
                                                         "\n  read_token_file: " + read_file + "\n" + more))) {}
};

/// A request with `headers`; {status or -1, body, response headers}.
struct answer {
  int status = -1;
  std::string body;
  httplib::Headers headers;
};

answer request(int port, const std::string& method, const std::string& path, const httplib::Headers& headers = {},
               const std::string& body = "", const std::string& type = "application/json") {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  httplib::Result r = method == "POST"      ? c.Post(path.c_str(), headers, body, type.c_str())
                      : method == "OPTIONS" ? c.Options(path.c_str(), headers)
                                            : c.Get(path.c_str(), headers);
  if (!r) return {};
  return {r->status, r->body, r->headers};
}

httplib::Headers bearer(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

std::string reason_of(const answer& a) {
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  return j.is_object() && j.contains("reason") ? j["reason"].get<std::string>() : "";
}

bool draining(int admin, const std::string& backend) {
  auto r = request(admin, "GET", "/api/v1/backends/" + backend, bearer(read_token));
  return r.status == 200 && nlohmann::json::parse(r.body)["draining"].get<bool>();
}

/// A TCP connection to loopback `port`, or -1.
int dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Whether the server closed `fd` (a read would return 0 or fail).
bool closed_by_peer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[256];
  return ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0;
}

/// A GET on a fresh connection, as the kubelet probes: {status, milliseconds}.
std::pair<int, double> timed_get(int port, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  c.set_read_timeout(1);
  auto r = c.Get(path.c_str());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return {r ? r->status : -1, ms};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

TEST_CASE("probes answer within 100 ms while 500 idle, 50 slowloris and 200 req/s of listings hit the admin port",
          "[integration][admin][probes]") {
  // The test holds about 600 descriptors.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  REQUIRE((lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= 2048));

  guarded_replica env("  probe_addr: \"127.0.0.1:0\"\n");
  const int admin = env.gw.admin_port, probe = env.gw.probe_port;
  REQUIRE(probe > 0);
  REQUIRE(timed_get(probe, "/readyz").first == 200);
  for (int i = 0; i < 5; ++i)
    REQUIRE(!backend_for_session(env.gw.grpc_port, uuid_of("s-" + std::to_string(i)), "ann").empty());

  constexpr auto load_for = std::chrono::seconds(8);
  std::atomic<bool> stop{false};
  std::atomic<int> idle_reopened{0}, slow_reopened{0}, heavy_ok{0}, heavy_shed{0}, heavy_failed{0};

  // 500 idle connections, reopened as the server closes them.
  std::thread idle([&] {
    std::vector<int> fds;
    for (int i = 0; i < 500; ++i) fds.push_back(dial(admin));
    while (!stop) {
      for (auto& fd : fds)
        if (fd < 0 || closed_by_peer(fd)) {
          if (fd >= 0) ::close(fd);
          fd = dial(admin);
          ++idle_reopened;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the poll interval
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  });
  // 50 slowloris connections: a request head, one byte a second.
  std::thread slow([&] {
    const std::string head = "GET /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(4000, 'a');
    std::vector<std::pair<int, std::size_t>> conns;
    for (int i = 0; i < 50; ++i) conns.emplace_back(dial(admin), 0);
    while (!stop) {
      for (auto& [fd, sent] : conns) {
        if (fd < 0 || closed_by_peer(fd) || ::send(fd, &head[sent % head.size()], 1, MSG_NOSIGNAL) != 1) {
          if (fd >= 0) ::close(fd);
          fd = dial(admin);
          sent = 0;
          ++slow_reopened;
          continue;
        }
        ++sent;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));  // one byte a second each
    }
    for (auto& c : conns)
      if (c.first >= 0) ::close(c.first);
  });
  // 200 requests a second to /metrics and /api/v1/sessions, from 4 clients.
  std::vector<std::thread> heavy;
  for (int t = 0; t < 4; ++t)
    heavy.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
        auto r = request(admin, "GET", (i + t) % 2 ? "/metrics" : "/api/v1/sessions?limit=100", bearer(read_token));
        (r.status == 200 ? heavy_ok : r.status == 503 ? heavy_shed : heavy_failed)++;
        std::this_thread::sleep_until(next);
      }
    });

  // Probes every 50 ms: on the probe listener (what the chart's kubelet
  // uses) and, for the record, on the admin port itself.
  std::vector<double> probe_ms, admin_ms;
  int probe_bad = 0, admin_bad = 0;
  const auto until = std::chrono::steady_clock::now() + load_for;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the load is on
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    for (const char* path : {"/healthz", "/readyz"}) {
      auto [code, ms] = timed_get(probe, path);
      probe_ms.push_back(ms);
      if (code != 200) ++probe_bad;
    }
    auto [code, ms] = timed_get(admin, "/healthz");
    if (code == 200) admin_ms.push_back(ms);
    else ++admin_bad;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the probe interval
  }
  stop = true;
  idle.join();
  slow.join();
  for (auto& t : heavy) t.join();

  const double p99 = percentile(probe_ms, 0.99), max = percentile(probe_ms, 1.0);
  std::cout << "admin probes under load: probe listener " << probe_ms.size() << " probes, p50 "
            << percentile(probe_ms, 0.5) << " ms, p99 " << p99 << " ms, max " << max << " ms, failed " << probe_bad
            << "; admin port /healthz answered " << admin_ms.size() << " (p99 " << percentile(admin_ms, 0.99)
            << " ms), refused or failed " << admin_bad << "; heavy 200 " << heavy_ok << ", 503 " << heavy_shed
            << ", failed " << heavy_failed << "; idle reopened " << idle_reopened << ", slowloris reopened "
            << slow_reopened << std::endl;
  CHECK(probe_bad == 0);
  CHECK(probe_ms.size() > 100);
  CHECK(max < 100.0);
  CHECK(heavy_ok > 0);
  // Once the load is gone, the admin port serves again at once.
  CHECK(eventually([&] { return timed_get(admin, "/healthz").first == 200; }, 5s));
  // The bounds did their work, and said so.
  CHECK(metric_value(admin, "scg_admin_connections_refused_total{listener=\"admin\"}") > 0);
  CHECK(metric_value(admin, "scg_admin_idle_closed_total{listener=\"admin\"}") > 0);
  CHECK(metric_value(admin, "scg_admin_request_timeouts_total{listener=\"admin\"}") > 0);
  CHECK(slow_reopened > 0);
  CHECK(eventually(metric(admin, "scg_admin_connections{listener=\"admin\"}") <= 2, 10s));
}

TEST_CASE("admin tokens by role: listings need read, drains need admin, and the audit trail names who drained",
          "[integration][admin][auth]") {
  guarded_replica env;
  const int admin = env.gw.admin_port;

  auto anon = request(admin, "GET", "/api/v1/sessions");
  CHECK(anon.status == 401);
  CHECK(reason_of(anon) == "missing_credential");
  CHECK(anon.headers.count("WWW-Authenticate") == 1);
  CHECK(request(admin, "GET", "/api/v1/sessions", bearer("guess")).status == 401);
  CHECK(request(admin, "GET", "/api/v1/sessions", bearer(read_token)).status == 200);
  CHECK(request(admin, "GET", "/api/v1/operations", bearer(admin_token)).status == 200);
  CHECK(request(admin, "GET", "/api/v1/events").status == 401);
  CHECK(request(admin, "GET", "/healthz").status == 200);
  CHECK(request(admin, "GET", "/metrics").status == 200);  // admin.open_metrics defaults to true
  CHECK(request(admin, "GET", "/").status == 200);

  auto by_reader = request(admin, "POST", "/api/v1/backends/fake-b/drain", bearer(read_token));
  CHECK(by_reader.status == 403);
  CHECK(reason_of(by_reader) == "read_only");
  CHECK(request(admin, "POST", "/api/v1/backends/fake-b/drain").status == 401);
  CHECK_FALSE(draining(admin, "fake-b"));
  REQUIRE(request(admin, "POST", "/api/v1/backends/fake-b/drain", bearer(admin_token)).status == 200);
  CHECK(draining(admin, "fake-b"));
  REQUIRE(request(admin, "POST", "/api/v1/backends/fake-b/undrain", bearer(admin_token)).status == 200);

  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"missing_credential\"}") >= 3);
  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"bad_credential\"}") == 1);
  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"read_only\"}") == 1);
  // The audit trail: who (role and token fingerprint, never the token) from where.
  const auto log = read_file(env.gw.proc.log_path());
  CHECK(log.find("admin.drain") != std::string::npos);
  CHECK(log.find("admin.undrain") != std::string::npos);
  CHECK(log.find("admin.denied") != std::string::npos);
  CHECK(log.find("\"by\":\"admin:") != std::string::npos);
  CHECK(log.find("\"peer\":\"127.0.0.1\"") != std::string::npos);
  CHECK(log.find(admin_token) == std::string::npos);
  CHECK(log.find(read_token) == std::string::npos);

  // A flood of refusals is counted in full and logged about once per 10 s.
  auto denied_lines = [&] {
    return occurrences(read_file(env.gw.proc.log_path()), "admin_denied reason=missing_credential");
  };
  const auto lines_before = denied_lines();
  const auto counted_before = metric_value(admin, "scg_admin_denied_total{reason=\"missing_credential\"}");
  for (int i = 0; i < 50; ++i) CHECK(request(admin, "GET", "/api/v1/sessions").status == 401);
  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"missing_credential\"}") == counted_before + 50);
  CHECK(denied_lines() <= lines_before + 1);

  SECTION("scg drain sends the token from --token-file, and says what is missing without one") {
    const std::string url = "http://127.0.0.1:" + std::to_string(admin);
    auto run_drain = [&](const std::vector<std::string>& extra, const std::string& tag) {
      std::vector<std::string> argv{bin("scg"), "drain", "--admin", url};
      argv.insert(argv.end(), extra.begin(), extra.end());
      argv.push_back("fake-a");
      process p{argv, env.dir.file(tag + ".log")};
      auto rc = p.wait(20s);
      return std::pair{rc, read_file(env.dir.file(tag + ".log"))};
    };
    auto [no_rc, no_out] = run_drain({}, "drain-no-token");
    CHECK(no_rc == 3);
    CHECK(no_out.find("--token-file") != std::string::npos);
    CHECK_FALSE(draining(admin, "fake-a"));
    auto [ok_rc, ok_out] = run_drain({"--token-file", env.admin_file}, "drain-token");
    INFO(ok_out);
    CHECK(ok_rc == 0);
    CHECK(draining(admin, "fake-a"));
    // Without --token-file, $SCG_ADMIN_TOKEN (set through env(1): the
    // harness passes this process's environment on): a wrong one is refused.
    auto with_env = [&](const std::string& token, const std::string& tag) {
      process p{{"/usr/bin/env", "SCG_ADMIN_TOKEN=" + token, bin("scg"), "drain", "--admin", url, "--undrain",
                 "fake-a"},
                env.dir.file(tag + ".log")};
      auto rc = p.wait(20s);
      return std::pair{rc, read_file(env.dir.file(tag + ".log"))};
    };
    auto [bad_rc, bad_out] = with_env("not-the-token", "undrain-bad-env");
    INFO(bad_out);
    CHECK(bad_rc == 3);
    CHECK(draining(admin, "fake-a"));
    auto [env_rc, env_out] = with_env(admin_token, "undrain-env");
    INFO(env_out);
    CHECK(env_rc == 0);
    CHECK_FALSE(draining(admin, "fake-a"));
  }

  SECTION("a new token file is read on SIGHUP: the old token stops working") {
    {
      std::ofstream(env.admin_file + ".new") << "adm-rotated-token\n";
    }
    REQUIRE(std::rename((env.admin_file + ".new").c_str(), env.admin_file.c_str()) == 0);
    env.gw.proc.signal(SIGHUP);
    CHECK(eventually([&] { return request(admin, "GET", "/api/v1/sessions", bearer("adm-rotated-token")).status == 200; }, 5s));
    CHECK(request(admin, "GET", "/api/v1/sessions", bearer(admin_token)).status == 401);
    CHECK(metric_value(admin, "scg_admin_token_reloads_total") >= 1);
  }
}

TEST_CASE("a cross-site form POST and a CORS preflight are refused, and nothing is drained",
          "[integration][admin][csrf]") {
  guarded_replica env;
  const int admin = env.gw.admin_port;
  // Exactly what a browser sends for <form method=post action=http://127.0.0.1:PORT/...> on evil.example.
  const httplib::Headers form{{"Origin", "http://evil.example"},
                              {"Referer", "http://evil.example/page.html"},
                              {"Sec-Fetch-Site", "cross-site"},
                              {"Sec-Fetch-Mode", "navigate"}};
  auto posted = request(admin, "POST", "/api/v1/backends/fake-a/drain", form, "x=1",
                        "application/x-www-form-urlencoded");
  CHECK(posted.status == 403);
  CHECK(reason_of(posted) == "cross_origin");
  CHECK(posted.headers.count("Access-Control-Allow-Origin") == 0);
  // Even with a stolen token a foreign page's request is refused.
  auto with_token = form;
  with_token.emplace("Authorization", "Bearer " + admin_token);
  CHECK(request(admin, "POST", "/api/v1/backends/fake-a/drain", with_token, "", "text/plain").status == 403);
  // fetch() with an Authorization header first asks by preflight.
  auto preflight = request(admin, "OPTIONS", "/api/v1/backends/fake-a/drain",
                           {{"Origin", "http://evil.example"},
                            {"Access-Control-Request-Method", "POST"},
                            {"Access-Control-Request-Headers", "authorization"}});
  CHECK(preflight.status == 403);
  CHECK(reason_of(preflight) == "preflight");
  CHECK(preflight.headers.count("Access-Control-Allow-Origin") == 0);
  CHECK(preflight.headers.count("Access-Control-Allow-Methods") == 0);
  // A read from another origin does not get the listings either.
  auto read = request(admin, "GET", "/api/v1/sessions", {{"Origin", "http://evil.example"}, {"Authorization", "Bearer " + read_token}});
  CHECK(read.status == 403);
  CHECK(read.headers.count("Access-Control-Allow-Origin") == 0);
  CHECK_FALSE(draining(admin, "fake-a"));
  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"cross_origin\"}") == 3);
  CHECK(metric_value(admin, "scg_admin_denied_total{reason=\"preflight\"}") == 1);
  // The page's own origin is fine.
  auto own = bearer(admin_token);
  own.emplace("Origin", "http://127.0.0.1:" + std::to_string(admin));
  CHECK(request(admin, "POST", "/api/v1/backends/fake-a/drain", own).status == 200);
}

TEST_CASE("without a token file the admin API refuses listings and drains, and probes and metrics stay open",
          "[integration][admin][auth]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-a");
  auto gw = start_gateway(dir, gateway_yaml({&a}, "admin: { open_metrics: true }\n"));
  auto drain = request(gw.admin_port, "POST", "/api/v1/backends/fake-a/drain");
  CHECK(drain.status == 403);
  CHECK(reason_of(drain) == "no_token_configured");
  CHECK(drain.body.find("admin.token_file") != std::string::npos);
  CHECK(request(gw.admin_port, "GET", "/api/v1/sessions").status == 403);
  CHECK(request(gw.admin_port, "GET", "/healthz").status == 200);
  CHECK(request(gw.admin_port, "GET", "/readyz").status == 200);
  CHECK(request(gw.admin_port, "GET", "/metrics").status == 200);
  CHECK(read_file(gw.proc.log_path()).find("admin_locked") != std::string::npos);
}

TEST_CASE("malformed admin requests get clean 4xx answers with authentication on", "[integration][admin][hostile]") {
  guarded_replica env;
  const int admin = env.gw.admin_port;
  const auto r = bearer(read_token);
  CHECK(request(admin, "GET", "/api/v1/sessions?limit=-1", r).status == 400);
  CHECK(request(admin, "GET", "/api/v1/sessions?limit=99999999999999", r).status == 400);
  CHECK(request(admin, "GET", "/api/v1/sessions?limit=5000", r).status == 200);  // clamped to 1000
  CHECK(request(admin, "GET", "/api/v1/operations?after=zz", r).status == 400);
  CHECK(request(admin, "GET", "/api/v1/events?after=-3", r).status == 400);
  CHECK(request(admin, "GET", "/api/v1/usage?window=9999h", r).status == 400);
  CHECK(request(admin, "GET", "/api/v1/backends/nope", r).status == 404);
  CHECK(request(admin, "GET", "/ui/../../etc/passwd").status == 404);
  CHECK(request(admin, "GET", "/ui/%2e%2e%2fetc%2fpasswd").status == 404);
  CHECK(request(admin, "GET", "/api/v1/sessions?x=" + std::string(20000, 'a'), r).status == 414);
  auto big_header = r;
  big_header.emplace("X-Big", std::string(20000, 'b'));
  const auto h = request(admin, "GET", "/api/v1/sessions", big_header).status;
  CHECK((h == 400 || h == 431));
  CHECK(request(admin, "POST", "/api/v1/backends/fake-a/drain", bearer(admin_token), std::string(1 << 20, 'x')).status == 413);
  CHECK_FALSE(draining(admin, "fake-a"));
  CHECK(request(admin, "GET", "/healthz").status == 200);
}

// Backend discovery from Kubernetes against a fake API server in the test:
// k8s_watcher runs in-process (no scg needed), the fake serves the
// EndpointSlice LIST and a scripted WATCH stream per request.

#include <catch2/catch.hpp>
#include <httplib.h>

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "discovery/k8s_discovery.hpp"
#include "tests/integration/harness.hpp"

using namespace scg::test;
using namespace scg::discovery;
using nlohmann::json;

namespace {

const std::string slices_path = "/apis/discovery.k8s.io/v1/namespaces/spark/endpointslices";

json endpoint(const std::string& ip, bool ready = true) {
  return {{"addresses", {ip}}, {"conditions", {{"ready", ready}}}};
}

json slice(const std::string& name, json endpoints, const std::string& rv) {
  return {{"kind", "EndpointSlice"},
          {"metadata",
           {{"name", name}, {"resourceVersion", rv}, {"labels", {{"kubernetes.io/service-name", "spark-connect"}}}}},
          {"addressType", "IPv4"},
          {"endpoints", std::move(endpoints)}};
}

json slice_list(std::vector<json> items, const std::string& rv) {
  return {{"kind", "EndpointSliceList"}, {"metadata", {{"resourceVersion", rv}}}, {"items", items}};
}

json event(const std::string& type, json object) { return {{"type", type}, {"object", std::move(object)}}; }

/// What a request to the fake carried.
struct seen_request {
  std::string resource_version, authorization, label_selector, bookmarks, timeout;
};

/// How a scripted watch stream ends after its events.
enum class stream_end { drop, hold };

/// A Kubernetes API server that knows one EndpointSlice collection. The
/// test scripts the answer to the n-th LIST and the n-th WATCH.
class fake_api_server {
 public:
  using script = std::function<void(std::size_t n, httplib::Response& res)>;

  fake_api_server(script on_list, script on_watch) : on_list_(std::move(on_list)), on_watch_(std::move(on_watch)) {
    srv_.Get(slices_path, [this](const httplib::Request& req, httplib::Response& res) {
      seen_request r{req.get_param_value("resourceVersion"), req.get_header_value("Authorization"),
                     req.get_param_value("labelSelector"), req.get_param_value("allowWatchBookmarks"),
                     req.get_param_value("timeoutSeconds")};
      const bool watch = req.get_param_value("watch") == "true";
      std::size_t n;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto& log = watch ? watches_ : lists_;
        n = log.size();
        log.push_back(r);
      }
      (watch ? on_watch_ : on_list_)(n, res);
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    REQUIRE(eventually([&] { return srv_.is_running(); }, 5s));
  }
  ~fake_api_server() {
    stopping_ = true;  // held streams end
    srv_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<seen_request> lists() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lists_;
  }
  std::vector<seen_request> watches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return watches_;
  }

  /// A watch answer: `events` as newline-delimited JSON in a chunked body,
  /// then the connection is cut (drop) or kept open without a byte (hold).
  void stream(httplib::Response& res, std::vector<json> events, stream_end end) {
    auto sent = std::make_shared<bool>(false);
    res.set_chunked_content_provider("application/json", [this, events, end, sent](std::size_t, httplib::DataSink& sink) {
      if (!*sent) {
        for (const auto& e : events) {
          const std::string line = e.dump() + "\n";
          if (!sink.write(line.data(), line.size())) return false;
        }
        *sent = true;
        return true;
      }
      if (end == stream_end::drop || stopping_) return false;  // no last chunk: a cut connection
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // holds the watch open: the pause between polls of the provider
      return true;
    });
  }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  script on_list_, on_watch_;
  mutable std::mutex mutex_;
  std::vector<seen_request> lists_, watches_;
};

/// Every set the watcher reported, in order.
class reports {
 public:
  k8s_watcher::callback callback() {
    return [this](std::vector<scg::actors::backend_spec> specs) {
      std::vector<std::string> addresses;
      for (const auto& s : specs) addresses.push_back(s.address);
      std::lock_guard<std::mutex> lock(mutex_);
      sets_.push_back(addresses);
    };
  }
  std::vector<std::vector<std::string>> sets() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sets_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::vector<std::string>> sets_;
};

k8s_discovery_config config_for(const fake_api_server& api, const temp_dir& dir) {
  k8s_discovery_config cfg;
  cfg.namespace_ = "spark";
  cfg.service_name = "spark-connect";
  cfg.port = 15002;
  cfg.api_server = api.url();
  cfg.token_file = dir.file("token");
  cfg.ca_file = dir.file("no-ca.crt");  // plain http: never read
  cfg.resync_secs = 60;
  return cfg;
}

using set = std::vector<std::string>;

}  // namespace

TEST_CASE("a dropped watch is resumed from the last resourceVersion with a fresh token, and ready "
          "backends come and go without a restart",
          "[integration][discovery]") {
  temp_dir dir;
  dir.write("token", "token-one\n");
  fake_api_server* api_ptr = nullptr;
  fake_api_server api(
      [](std::size_t, httplib::Response& res) {
        res.set_content(slice_list({slice("spark-connect-a", {endpoint("10.0.0.1"), endpoint("10.0.0.2")}, "100")},
                                   "100")
                            .dump(),
                        "application/json");
      },
      [&](std::size_t n, httplib::Response& res) {
        if (n == 0) {
          // The token rotates while the first watch runs; the resumed one must carry the new one.
          dir.write("token", "token-two\n");
          api_ptr->stream(res, {event("ADDED", slice("spark-connect-b", {endpoint("10.0.0.3")}, "101"))},
                          stream_end::drop);
        } else if (n == 1) {
          json bookmark = {{"type", "BOOKMARK"},
                           {"object", {{"kind", "EndpointSlice"}, {"metadata", {{"resourceVersion", "150"}}}}}};
          api_ptr->stream(res,
                          {bookmark, event("MODIFIED", slice("spark-connect-a",
                                                             {endpoint("10.0.0.1"), endpoint("10.0.0.2", false)},
                                                             "160"))},
                          stream_end::hold);
        } else {
          api_ptr->stream(res, {}, stream_end::hold);
        }
      });
  api_ptr = &api;
  reports seen;
  auto watcher = std::make_unique<k8s_watcher>(config_for(api, dir), seen.callback());

  REQUIRE(eventually([&] { return seen.sets().size() >= 3; }, 10s));
  auto sets = seen.sets();
  CHECK(sets[0] == set{"10.0.0.1:15002", "10.0.0.2:15002"});
  CHECK(sets[1] == set{"10.0.0.1:15002", "10.0.0.2:15002", "10.0.0.3:15002"});
  CHECK(sets[2] == set{"10.0.0.1:15002", "10.0.0.3:15002"});

  auto lists = api.lists();
  REQUIRE(lists.size() == 1);  // a dropped watch resumes; it does not LIST again
  CHECK(lists[0].authorization == "Bearer token-one");
  CHECK(lists[0].label_selector == "kubernetes.io/service-name=spark-connect");
  auto watches = api.watches();
  REQUIRE(watches.size() == 2);
  CHECK(watches[0].resource_version == "100");
  CHECK(watches[0].bookmarks == "true");
  CHECK(watches[0].timeout == "60");
  CHECK(watches[1].resource_version == "101");
  CHECK(watches[1].authorization == "Bearer token-two");

  auto stats = watcher->stats();
  CHECK(stats.lists == 1);
  CHECK(stats.watches == 2);
  CHECK(stats.events == 3);  // ADDED, BOOKMARK, MODIFIED
  CHECK(stats.errors == 1);  // the dropped watch
  CHECK(stats.updates == 3);

  // The watcher stops promptly in the middle of a quiet watch.
  auto before = std::chrono::steady_clock::now();
  watcher.reset();
  CHECK(std::chrono::steady_clock::now() - before < 2s);
}

TEST_CASE("a watch whose resourceVersion has expired (410 Gone) lists again and resumes from the new list",
          "[integration][discovery]") {
  temp_dir dir;
  dir.write("token", "t");
  const bool as_event = GENERATE(true, false);
  INFO((as_event ? "an ERROR event with code 410" : "an HTTP 410 answer"));
  fake_api_server* api_ptr = nullptr;
  fake_api_server api(
      [](std::size_t n, httplib::Response& res) {
        json list = n == 0 ? slice_list({slice("s-a", {endpoint("10.0.0.1")}, "5")}, "5")
                           : slice_list({slice("s-b", {endpoint("10.0.0.2"), endpoint("10.0.0.3")}, "20")}, "20");
        res.set_content(list.dump(), "application/json");
      },
      [&](std::size_t n, httplib::Response& res) {
        json gone = {{"kind", "Status"}, {"apiVersion", "v1"},   {"status", "Failure"},
                     {"code", 410},      {"reason", "Expired"}, {"message", "too old resource version: 5 (19)"}};
        if (n == 0 && as_event) {
          api_ptr->stream(res, {event("ERROR", gone)}, stream_end::hold);
        } else if (n == 0) {
          res.status = 410;
          res.set_content(gone.dump(), "application/json");
        } else {
          api_ptr->stream(res, {}, stream_end::hold);
        }
      });
  api_ptr = &api;
  reports seen;
  k8s_watcher watcher(config_for(api, dir), seen.callback());

  REQUIRE(eventually([&] { return seen.sets().size() >= 2 && api.watches().size() >= 2; }, 10s));
  auto sets = seen.sets();
  CHECK(sets[0] == set{"10.0.0.1:15002"});
  CHECK(sets[1] == set{"10.0.0.2:15002", "10.0.0.3:15002"});
  CHECK(api.lists().size() == 2);
  CHECK(api.watches()[0].resource_version == "5");
  CHECK(api.watches()[1].resource_version == "20");
  CHECK(watcher.stats().lists == 2);
}

TEST_CASE("a LIST the API server refuses is retried with backoff until it answers", "[integration][discovery]") {
  temp_dir dir;  // no token file: the requests go without Authorization
  fake_api_server* api_ptr = nullptr;
  fake_api_server api(
      [](std::size_t n, httplib::Response& res) {
        if (n < 2) {
          res.status = n == 0 ? 403 : 500;
          res.set_content(R"({"kind":"Status","code":403,"message":"endpointslices is forbidden"})",
                          "application/json");
          return;
        }
        res.set_content(slice_list({slice("s", {endpoint("10.0.0.9")}, "7")}, "7").dump(), "application/json");
      },
      [&](std::size_t, httplib::Response& res) { api_ptr->stream(res, {}, stream_end::hold); });
  api_ptr = &api;
  reports seen;
  auto started = std::chrono::steady_clock::now();
  k8s_watcher watcher(config_for(api, dir), seen.callback());

  REQUIRE(eventually([&] { return !seen.sets().empty(); }, 10s));
  CHECK(std::chrono::steady_clock::now() - started >= 300ms);  // 100 ms, then 200 ms
  CHECK(seen.sets()[0] == set{"10.0.0.9:15002"});
  CHECK(api.lists().size() == 3);
  CHECK(api.lists()[0].authorization.empty());
  auto stats = watcher.stats();
  CHECK(stats.errors == 2);
  CHECK(stats.lists == 1);
}

TEST_CASE("scg follows a Service's ready endpoints: pods join and leave without a restart",
          "[integration][discovery]") {
  temp_dir dir;
  // Two Spark Connect "pods" on one port of two loopback addresses.
  auto pod2 = start_fake(dir, "pod-2", {}, "127.0.0.2");
  const auto port = std::to_string(pod2.grpc_port);
  auto pod3 = start_fake(dir, "pod-3", {"--listen", "127.0.0.3:" + port}, "127.0.0.3");
  REQUIRE(pod3.grpc_port == pod2.grpc_port);

  // First watch: pod-3 becomes ready, and the stream stays open until the
  // test has seen it; then it is cut. The resumed watch: pod-3 not ready.
  std::atomic<bool> cut_first{false};
  fake_api_server* self = nullptr;  // the scripts stream through the server they belong to
  fake_api_server api(
      [&](std::size_t, httplib::Response& res) {
        res.set_content(slice_list({slice("sc-1", json::array({endpoint("127.0.0.2")}), "10")}, "10").dump(),
                        "application/json");
      },
      [&](std::size_t n, httplib::Response& res) {
        if (n > 0) {
          auto eps = json::array({endpoint("127.0.0.2"), endpoint("127.0.0.3", false)});
          return self->stream(res, {event("MODIFIED", slice("sc-1", eps, std::to_string(11 + n)))}, stream_end::hold);
        }
        const auto line = event("MODIFIED", slice("sc-1", json::array({endpoint("127.0.0.2"), endpoint("127.0.0.3")}), "11")).dump() + "\n";
        auto sent = std::make_shared<bool>(false);
        res.set_chunked_content_provider("application/json", [&cut_first, line, sent](std::size_t, httplib::DataSink& sink) {
          if (!*sent) {
            *sent = true;
            return sink.write(line.data(), line.size());
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // holds the watch open until the cut
          return !cut_first.load();  // false: the connection is cut
        });
      });
  self = &api;
  auto token = dir.write("token", "sa-token\n");
  auto gw = start_gateway(dir,
                          "bind_addr: \"127.0.0.1:0\"\nadmin_addr: \"127.0.0.1:0\"\n"
                          "backend_discovery: { type: k8s, namespace: spark, service_name: spark-connect, port: " +
                              port + ", api_server: \"" + api.url() + "\", token_file: \"" + token + "\" }\n",
                          "discovered");
  auto listed = [&] {
    std::map<std::string, bool> out;  // name → removed
    const auto view = json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
    for (const auto& b : view["backends"]) out[b["name"].get<std::string>()] = b["removed"].get<bool>();
    return out;
  };
  const std::string b2 = "spark-connect@127.0.0.2:" + port, b3 = "spark-connect@127.0.0.3:" + port;
  // The first watch adds pod-3, then drops; the resumed one takes it out again.
  REQUIRE(eventually([&] { auto l = listed(); return l.count(b2) && l.count(b3) && !l[b3]; }, 5s));
  CHECK(backend_for_session(gw.grpc_port, uuid_of("on-pod-3"), "kim") != "");
  cut_first = true;
  REQUIRE(eventually([&] { auto l = listed(); return l.count(b3) && l[b3]; }, 5s));
  CHECK_FALSE(listed()[b2]);
  std::set<std::string> used;
  for (int i = 0; i < 6; ++i)
    used.insert(backend_for_session(gw.grpc_port, uuid_of("disc-" + std::to_string(i)), "kim"));
  CHECK(used == std::set<std::string>{"pod-2"});
  REQUIRE(!api.watches().empty());
  CHECK(api.watches()[0].authorization == "Bearer sa-token");
  CHECK(metric_value(gw.admin_port, "scg_backends_added_total") == 2);
  CHECK(metric_value(gw.admin_port, "scg_backends_removed_total") == 1);
}

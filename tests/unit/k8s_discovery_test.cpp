#include "discovery/k8s_discovery.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

using namespace scg::discovery;
using scg::actors::backend_spec;
using nlohmann::json;

namespace {

k8s_discovery_config spark_config() {
  k8s_discovery_config cfg;
  cfg.namespace_ = "spark";
  cfg.service_name = "spark-connect";
  cfg.port = 15002;
  cfg.ui_url = "http://{host}:4040";
  return cfg;
}

/// One endpoint; `ready` / `terminating` null leave the condition out.
json endpoint(const std::string& ip, json ready = true, json terminating = nullptr) {
  json conditions = json::object();
  if (!ready.is_null()) conditions["ready"] = ready;
  if (!terminating.is_null()) conditions["terminating"] = terminating;
  return {{"addresses", {ip}}, {"conditions", conditions}, {"targetRef", {{"kind", "Pod"}, {"name", "pod-" + ip}}}};
}

json slice(const std::string& name, json endpoints, const std::string& rv = "1",
           const std::string& type = "IPv4") {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", name},
            {"namespace", "spark"},
            {"resourceVersion", rv},
            {"labels", {{"kubernetes.io/service-name", "spark-connect"}}}}},
          {"addressType", type},
          {"ports", {{{"name", "grpc"}, {"port", 15002}, {"protocol", "TCP"}}}},
          {"endpoints", std::move(endpoints)}};
}

json slice_list(std::vector<json> items, const std::string& rv) {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSliceList"},
          {"metadata", {{"resourceVersion", rv}}},
          {"items", items}};
}

json event(const std::string& type, json object) { return {{"type", type}, {"object", std::move(object)}}; }

std::vector<std::string> addresses(const std::vector<backend_spec>& specs) {
  std::vector<std::string> out;
  for (const auto& s : specs) out.push_back(s.address);
  return out;
}

}  // namespace

TEST_CASE("ready endpoints of every slice become backends named after the service", "[discovery]") {
  auto list = slice_list({slice("spark-connect-abc", {endpoint("10.0.0.2"), endpoint("10.0.0.1")}),
                          slice("spark-connect-def", {endpoint("10.0.1.7")})},
                         "500");
  auto specs = ready_backends(list, spark_config());
  REQUIRE(specs.size() == 3);
  CHECK(specs[0] == backend_spec{"spark-connect@10.0.0.1:15002", "10.0.0.1:15002", "http://10.0.0.1:4040"});
  CHECK(specs[1].address == "10.0.0.2:15002");
  CHECK(specs[2].name == "spark-connect@10.0.1.7:15002");
}

TEST_CASE("endpoints not ready or terminating are left out, and an absent ready counts as ready",
          "[discovery]") {
  auto s = slice("s", {endpoint("10.0.0.1", true), endpoint("10.0.0.2", false),
                       endpoint("10.0.0.3", false, true), endpoint("10.0.0.4", nullptr),
                       endpoint("10.0.0.5", nullptr, true),
                       json{{"addresses", {"10.0.0.6"}}}});
  CHECK(addresses(ready_backends(json::array({s}), spark_config())) ==
        std::vector<std::string>{"10.0.0.1:15002", "10.0.0.4:15002", "10.0.0.6:15002"});
}

TEST_CASE("IPv6 endpoints are bracketed in the address, the name and the UI URL", "[discovery]") {
  auto specs = ready_backends(json::array({slice("v6", {endpoint("fd00::1")}, "1", "IPv6")}), spark_config());
  REQUIRE(specs.size() == 1);
  CHECK(specs[0] == backend_spec{"spark-connect@[fd00::1]:15002", "[fd00::1]:15002", "http://[fd00::1]:4040"});
}

TEST_CASE("an endpoint listed in two slices is one backend, and only its first address counts", "[discovery]") {
  json twice = json::object();
  twice["a"] = slice("a", {endpoint("10.0.0.1")});
  twice["b"] = slice("b", {endpoint("10.0.0.1"),
                           json{{"addresses", {"10.0.0.9", "10.0.0.8"}}, {"conditions", {{"ready", true}}}}});
  CHECK(addresses(ready_backends(twice, spark_config())) ==
        std::vector<std::string>{"10.0.0.1:15002", "10.0.0.9:15002"});
}

TEST_CASE("malformed slices and endpoints are skipped, not fatal", "[discovery]") {
  json mess = json::array({json(42), json{{"endpoints", nullptr}}, json{{"endpoints", {json("x"), json::object()}}},
                           json{{"endpoints", {{{"addresses", json::array()}}, {{"addresses", {7}}}}}},
                           slice("ok", {endpoint("10.0.0.1")})});
  CHECK(addresses(ready_backends(mess, spark_config())) == std::vector<std::string>{"10.0.0.1:15002"});
  CHECK(ready_backends(json("nope"), spark_config()).empty());
  CHECK(ready_backends(json::object(), spark_config()).empty());
}

TEST_CASE("the configured port is used and an empty ui_url stays empty", "[discovery]") {
  auto cfg = spark_config();
  cfg.port = 7077;
  cfg.ui_url.clear();
  auto specs = ready_backends(json::array({slice("s", {endpoint("10.1.2.3")})}), cfg);
  REQUIRE(specs.size() == 1);
  CHECK(specs[0] == backend_spec{"spark-connect@10.1.2.3:7077", "10.1.2.3:7077", ""});
}

TEST_CASE("a LIST answer replaces the slices and sets the resourceVersion", "[discovery]") {
  endpoint_slice_state state;
  CHECK(state.resource_version().empty());
  REQUIRE(state.reset(slice_list({slice("a", {endpoint("10.0.0.1")}), slice("b", {endpoint("10.0.0.2")})}, "100")));
  CHECK(state.resource_version() == "100");
  CHECK(state.slices().size() == 2);
  CHECK(state.ready(spark_config()).size() == 2);

  REQUIRE(state.reset(json{{"kind", "EndpointSliceList"}, {"metadata", {{"resourceVersion", "200"}}}, {"items", nullptr}}));
  CHECK(state.slices().empty());
  CHECK(state.resource_version() == "200");

  CHECK_FALSE(state.reset(json{{"kind", "Status"}, {"code", 403}}));
  CHECK_FALSE(state.reset(json::array()));
  CHECK(state.resource_version() == "200");  // a bad answer changes nothing
}

TEST_CASE("ADDED, MODIFIED and DELETED events change the slices by name and move the resourceVersion",
          "[discovery]") {
  const auto cfg = spark_config();
  endpoint_slice_state state;
  REQUIRE(state.reset(slice_list({slice("a", {endpoint("10.0.0.1"), endpoint("10.0.0.2")})}, "100")));

  CHECK(state.apply(event("ADDED", slice("b", {endpoint("10.0.0.3")}, "101"))) == event_effect::applied);
  CHECK(state.resource_version() == "101");
  CHECK(addresses(state.ready(cfg)) ==
        std::vector<std::string>{"10.0.0.1:15002", "10.0.0.2:15002", "10.0.0.3:15002"});

  CHECK(state.apply(event("MODIFIED", slice("a", {endpoint("10.0.0.1"), endpoint("10.0.0.2", false)}, "102"))) ==
        event_effect::applied);
  CHECK(state.resource_version() == "102");
  CHECK(addresses(state.ready(cfg)) == std::vector<std::string>{"10.0.0.1:15002", "10.0.0.3:15002"});

  CHECK(state.apply(event("DELETED", slice("b", {endpoint("10.0.0.3")}, "103"))) == event_effect::applied);
  CHECK(state.resource_version() == "103");
  CHECK(addresses(state.ready(cfg)) == std::vector<std::string>{"10.0.0.1:15002"});

  // MODIFIED of a slice never seen adds it; DELETED of one never seen is harmless.
  CHECK(state.apply(event("MODIFIED", slice("c", {endpoint("10.0.0.4")}, "104"))) == event_effect::applied);
  CHECK(state.apply(event("DELETED", slice("zzz", json::array(), "105"))) == event_effect::applied);
  CHECK(state.resource_version() == "105");
  CHECK(state.slices().size() == 2);
}

TEST_CASE("a bookmark moves only the resourceVersion", "[discovery]") {
  endpoint_slice_state state;
  REQUIRE(state.reset(slice_list({slice("a", {endpoint("10.0.0.1")})}, "100")));
  auto before = state.slices();
  json bookmark = {{"type", "BOOKMARK"},
                   {"object", {{"kind", "EndpointSlice"}, {"metadata", {{"resourceVersion", "180"}}}}}};
  CHECK(state.apply(bookmark) == event_effect::bookmark);
  CHECK(state.resource_version() == "180");
  CHECK(state.slices() == before);
}

TEST_CASE("an ERROR event with code 410 asks for a new LIST - other errors and junk do not", "[discovery]") {
  endpoint_slice_state state;
  REQUIRE(state.reset(slice_list({slice("a", {endpoint("10.0.0.1")})}, "100")));
  json gone = event("ERROR", {{"kind", "Status"}, {"status", "Failure"}, {"code", 410}, {"reason", "Expired"},
                              {"message", "too old resource version: 100 (250)"}});
  CHECK(state.apply(gone) == event_effect::expired);
  CHECK(state.apply(event("ERROR", {{"kind", "Status"}, {"code", 500}})) == event_effect::error);
  CHECK(state.apply(json::parse("[1,2]")) == event_effect::ignored);
  CHECK(state.apply(json{{"type", "ADDED"}}) == event_effect::ignored);
  CHECK(state.apply(event("ADDED", {{"metadata", {{"resourceVersion", "300"}}}})) == event_effect::ignored);
  CHECK(state.apply(event("SOMETHING", slice("x", json::array(), "301"))) == event_effect::ignored);
  CHECK(state.resource_version() == "100");
  CHECK(state.slices().size() == 1);
}

TEST_CASE("the API server comes from the config, else from the pod's environment", "[discovery]") {
  k8s_discovery_config cfg;
  cfg.api_server = "http://127.0.0.1:8001";
  CHECK(api_server_url(cfg) == "http://127.0.0.1:8001");
  cfg.api_server.clear();
  const char* old_host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* old_port = std::getenv("KUBERNETES_SERVICE_PORT");
  std::string saved_host = old_host ? old_host : "", saved_port = old_port ? old_port : "";
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  CHECK(api_server_url(cfg) == "https://10.96.0.1:443");
  setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
  CHECK(api_server_url(cfg) == "https://[fd00:10:96::1]:443");
  unsetenv("KUBERNETES_SERVICE_HOST");
  CHECK(api_server_url(cfg).empty());
  if (old_host) setenv("KUBERNETES_SERVICE_HOST", saved_host.c_str(), 1);
  if (old_port) setenv("KUBERNETES_SERVICE_PORT", saved_port.c_str(), 1);
  else unsetenv("KUBERNETES_SERVICE_PORT");
}

// Tracing end to end: scg continues or starts a W3C trace, forwards its own
// span id to the backend, and exports the span to an OTLP/HTTP collector.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <mutex>
#include <optional>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

/// An OTLP/HTTP (JSON) collector on loopback that keeps every span it is sent.
class otlp_collector {
 public:
  otlp_collector() {
    srv_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      auto body = nlohmann::json::parse(req.body, nullptr, false);
      std::lock_guard lock{mu_};
      if (body.is_object())
        for (const auto& rs : body["resourceSpans"])
          for (const auto& ss : rs["scopeSpans"])
            for (const auto& s : ss["spans"]) spans_.push_back(s);
      res.status = 200;
      res.set_content("{}", "application/json");
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
  }
  ~otlp_collector() {
    srv_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces"; }

  /// The span whose scg.request_id attribute is `request_id`, once exported.
  std::optional<nlohmann::json> span_for(const std::string& request_id) {
    std::lock_guard lock{mu_};
    for (const auto& s : spans_)
      if (attribute(s, "scg.request_id") == request_id) return s;
    return std::nullopt;
  }

  static std::string attribute(const nlohmann::json& span, const std::string& key) {
    for (const auto& a : span["attributes"])
      if (a["key"] == key) {
        const auto& v = a["value"];
        return v.contains("stringValue") ? v["stringValue"].get<std::string>() : v["intValue"].get<std::string>();
      }
    return {};
  }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<nlohmann::json> spans_;
};

/// A Config call through `port` with x-request-id `request_id` and, when
/// given, `traceparent`; the traceparent the backend received.
std::string config_call(int port, const std::string& request_id, const std::string& traceparent = "") {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  ctx.AddMetadata("x-request-id", request_id);
  if (!traceparent.empty()) ctx.AddMetadata("traceparent", traceparent);
  sc::ConfigRequest req;
  req.set_session_id("3a4d2a8e-6b0c-4a77-9d0a-5f4c1b2e9d10");
  *req.mutable_user_context() = user("tracy");
  sc::ConfigResponse resp;
  auto status = stub->Config(&ctx, req, &resp);
  REQUIRE(status.ok());
  return header(ctx, "x-fake-traceparent");
}

}  // namespace

TEST_CASE("scg continues an inbound trace and starts a root one, and the backend sees scg's span as parent",
          "[integration][tracing]") {
  temp_dir dir;
  otlp_collector collector;
  auto fake = start_fake(dir, "fake-t");
  auto gw = start_gateway(dir,
                          gateway_yaml({&fake}, "tracing: { otlp_endpoint: \"" + collector.endpoint() +
                                                    "\", service_name: scg-it, flush_interval_ms: 100 }\n"),
                          "tracing");

  SECTION("a call with a traceparent gets a child span in the client's trace") {
    const std::string inbound_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const std::string inbound_span = "00f067aa0ba902b7";
    const auto seen = config_call(gw.grpc_port, "trace-child", "00-" + inbound_trace + "-" + inbound_span + "-01");
    std::optional<nlohmann::json> span;
    REQUIRE(eventually([&] { return (span = collector.span_for("trace-child")).has_value(); }, 5s));
    INFO(span->dump());
    CHECK((*span)["traceId"] == inbound_trace);
    CHECK((*span)["parentSpanId"] == inbound_span);
    CHECK((*span)["spanId"] != inbound_span);
    CHECK((*span)["name"] == "/spark.connect.SparkConnectService/Config");
    CHECK((*span)["kind"] == 2);
    CHECK((*span)["status"]["code"] == 1);
    CHECK(otlp_collector::attribute(*span, "rpc.system") == "grpc");
    CHECK(otlp_collector::attribute(*span, "rpc.service") == "spark.connect.SparkConnectService");
    CHECK(otlp_collector::attribute(*span, "rpc.method") == "Config");
    CHECK(otlp_collector::attribute(*span, "rpc.grpc.status_code") == "0");
    CHECK(otlp_collector::attribute(*span, "scg.backend") == "fake-t");
    // The backend's parent is scg's span, in the client's trace, flags kept.
    CHECK(seen == "00-" + inbound_trace + "-" + (*span)["spanId"].get<std::string>() + "-01");
  }

  SECTION("a call without a traceparent gets a root span, and the backend sees its ids") {
    const auto seen = config_call(gw.grpc_port, "trace-root");
    std::optional<nlohmann::json> span;
    REQUIRE(eventually([&] { return (span = collector.span_for("trace-root")).has_value(); }, 5s));
    INFO(span->dump());
    CHECK_FALSE(span->contains("parentSpanId"));
    const auto trace = (*span)["traceId"].get<std::string>();
    CHECK(trace.size() == 32);
    CHECK(trace != std::string(32, '0'));
    CHECK(seen == "00-" + trace + "-" + (*span)["spanId"].get<std::string>() + "-01");
  }

  SECTION("a malformed traceparent starts a new trace instead of being forwarded") {
    const auto seen = config_call(gw.grpc_port, "trace-bad", "00-NOT-A-TRACE-01");
    std::optional<nlohmann::json> span;
    REQUIRE(eventually([&] { return (span = collector.span_for("trace-bad")).has_value(); }, 5s));
    CHECK_FALSE(span->contains("parentSpanId"));
    CHECK(seen == "00-" + (*span)["traceId"].get<std::string>() + "-" + (*span)["spanId"].get<std::string>() + "-01");
  }

  CHECK(eventually(metric(gw.admin_port, "scg_tracing_spans_exported_total") >= 1, 5s));
  CHECK(metric_value(gw.admin_port, "scg_tracing_spans_dropped_total") == 0);
}

TEST_CASE("without a tracing block the client's traceparent reaches the backend untouched",
          "[integration][tracing]") {
  temp_dir dir;
  auto fake = start_fake(dir, "fake-u");
  auto gw = start_gateway(dir, gateway_yaml({&fake}), "no-tracing");
  const std::string inbound = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  CHECK(config_call(gw.grpc_port, "untouched", inbound) == inbound);
  CHECK(config_call(gw.grpc_port, "absent") == "none");
  CHECK(metric_value(gw.admin_port, "scg_tracing_spans_exported_total") == 0);
}

#include "core/tracing.hpp"
#include "net/net_stats.hpp"
#include "net/span_exporter.hpp"

#include <catch2/catch.hpp>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/metrics.hpp"

using namespace scg::core;
using scg::net::span_exporter;
using namespace std::chrono_literals;

namespace {

constexpr const char* example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An OTLP/HTTP collector on loopback that records the bodies it is sent;
/// answers `status`, and holds requests while `hold` is set.
class collector {
 public:
  collector() {
    srv_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock lock{mu_};
      bodies_.push_back(req.body);
      content_types_.push_back(req.get_header_value("Content-Type"));
      changed_.notify_all();
      changed_.wait(lock, [this] { return !hold_; });
      res.status = status_;
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
  }
  ~collector() {
    release();
    srv_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces"; }
  void set_status(int s) {
    std::lock_guard lock{mu_};
    status_ = s;
  }
  void hold() {
    std::lock_guard lock{mu_};
    hold_ = true;
  }
  void release() {
    std::lock_guard lock{mu_};
    hold_ = false;
    changed_.notify_all();
  }
  /// Waits up to `timeout` for `n` requests; the spans of every request so far.
  std::vector<std::vector<nlohmann::json>> requests(std::size_t n, std::chrono::milliseconds timeout = 2s) {
    std::unique_lock lock{mu_};
    changed_.wait_for(lock, timeout, [&] { return bodies_.size() >= n; });
    std::vector<std::vector<nlohmann::json>> out;
    for (const auto& b : bodies_) {
      auto j = nlohmann::json::parse(b);
      out.push_back(j["resourceSpans"][0]["scopeSpans"][0]["spans"].get<std::vector<nlohmann::json>>());
    }
    return out;
  }
  std::string body(std::size_t i) {
    std::lock_guard lock{mu_};
    return bodies_.at(i);
  }
  std::string content_type(std::size_t i) {
    std::lock_guard lock{mu_};
    return content_types_.at(i);
  }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> bodies_, content_types_;
  int status_ = 200;
  bool hold_ = false;
};

/// A loopback port nobody listens on (bound, then closed).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

scg::config::tracing options(const std::string& endpoint, int batch, int capacity, int flush_ms) {
  scg::config::tracing t;
  t.otlp_endpoint = endpoint;
  t.batch_size = batch;
  t.queue_capacity = capacity;
  t.flush_interval_ms = flush_ms;
  t.timeout_ms = 500;
  return t;
}

span make_span(const std::string& name) {
  span s;
  s.trace = new_trace_id();
  s.id = new_span_id();
  s.name = name;
  s.start_unix_ns = unix_now_ns();
  s.end_unix_ns = s.start_unix_ns + 1000;
  return s;
}

template <class F>
bool eventually(F ok, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!ok()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);  // the poll interval
  }
  return true;
}

}  // namespace

TEST_CASE("a version 00 traceparent is read and written back unchanged", "[tracing]") {
  auto tp = parse_traceparent(example);
  REQUIRE(tp);
  CHECK(to_hex(tp->trace) == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(to_hex(tp->span) == "00f067aa0ba902b7");
  CHECK(tp->flags == 1);
  CHECK(format_traceparent(*tp) == example);
  auto unsampled = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  REQUIRE(unsampled);
  CHECK(unsampled->flags == 0);
}

TEST_CASE("traceparents with wrong lengths, uppercase or bad hex, zero ids or version ff are refused",
          "[tracing]") {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",        // short flags
           "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",        // short trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",        // short span id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",       // version 00 is exact
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // … with nothing after
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       // uppercase
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",       // not hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",       // separators
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",       // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // version ff
           "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       }) {
    INFO(bad);
    CHECK_FALSE(parse_traceparent(bad));
  }
}

TEST_CASE("a later version's traceparent is read by its first four fields", "[tracing]") {
  auto tp = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds");
  REQUIRE(tp);
  CHECK(format_traceparent(*tp) == example);  // re-written as version 00
  CHECK(parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  CHECK_FALSE(parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

TEST_CASE("new trace and span ids are non-zero and do not repeat", "[tracing]") {
  std::set<std::string> traces, spans;
  for (int i = 0; i < 1000; ++i) {
    traces.insert(to_hex(new_trace_id()));
    spans.insert(to_hex(new_span_id()));
  }
  CHECK(traces.size() == 1000);
  CHECK(spans.size() == 1000);
  CHECK(traces.count(std::string(32, '0')) == 0);
}

TEST_CASE("a span's OTLP JSON has hex ids, a parent only when it has one, and the status", "[tracing]") {
  span root = make_span("/spark.connect.SparkConnectService/Config");
  root.attributes = {{"rpc.system", "grpc"}};
  root.grpc_status_code = 0;
  span child = root;
  child.id = new_span_id();
  child.parent = root.id;
  child.grpc_status_code = 14;
  child.error = true;
  auto body = nlohmann::json::parse(otlp_json({root, child}, "scg-test"));
  const auto& rs = body["resourceSpans"][0];
  CHECK(rs["resource"]["attributes"][0]["key"] == "service.name");
  CHECK(rs["resource"]["attributes"][0]["value"]["stringValue"] == "scg-test");
  CHECK(rs["scopeSpans"][0]["scope"]["name"] == "scg");
  const auto& spans = rs["scopeSpans"][0]["spans"];
  REQUIRE(spans.size() == 2);
  CHECK(spans[0]["traceId"] == to_hex(root.trace));
  CHECK(spans[0]["spanId"] == to_hex(root.id));
  CHECK_FALSE(spans[0].contains("parentSpanId"));
  CHECK(spans[0]["kind"] == 2);
  CHECK(spans[0]["startTimeUnixNano"] == std::to_string(root.start_unix_ns));
  CHECK(spans[0]["endTimeUnixNano"] == std::to_string(root.end_unix_ns));
  CHECK(spans[0]["status"]["code"] == 1);
  CHECK(spans[0]["attributes"][0]["value"]["stringValue"] == "grpc");
  CHECK(spans[0]["attributes"][1]["key"] == "rpc.grpc.status_code");
  CHECK(spans[0]["attributes"][1]["value"]["intValue"] == "0");
  CHECK(spans[1]["parentSpanId"] == to_hex(root.id));
  CHECK(spans[1]["status"]["code"] == 2);
  CHECK(spans[1]["attributes"][1]["value"]["intValue"] == "14");
}

TEST_CASE("spans go to the collector in batches of batch_size, a partial one after flush_interval_ms",
          "[tracing]") {
  collector c;
  auto exporter = std::make_unique<span_exporter>(options(c.endpoint(), 3, 100, 200));
  for (int i = 0; i < 7; ++i) CHECK(exporter->submit(make_span("s" + std::to_string(i))));
  auto got = c.requests(3);
  REQUIRE(got.size() == 3);
  CHECK(got[0].size() == 3);
  CHECK(got[1].size() == 3);
  CHECK(got[2].size() == 1);  // the rest, once the flush interval passed
  CHECK(got[0][0]["name"] == "s0");
  CHECK(got[2][0]["name"] == "s6");
  CHECK(c.content_type(0) == "application/json");
  CHECK(eventually([&] { return exporter->exported() == 7; }, 1s));
  CHECK(exporter->dropped() == 0);
  CHECK(exporter->failed() == 0);
}

TEST_CASE("a full queue drops spans and counts them, without blocking submit", "[tracing]") {
  collector c;
  c.hold();  // the first export request hangs, so the queue fills
  auto exporter = std::make_unique<span_exporter>(options(c.endpoint(), 1, 4, 1000));
  const auto before = scg::net::global_net_stats().tracing_spans_dropped_total.load();
  CHECK(exporter->submit(make_span("first")));
  REQUIRE(c.requests(1).size() == 1);  // taken by the worker: the queue is empty again
  int accepted = 0;
  for (int i = 0; i < 10; ++i) accepted += exporter->submit(make_span("more")) ? 1 : 0;
  CHECK(accepted == 4);
  CHECK(exporter->dropped() == 6);
  CHECK(scg::net::global_net_stats().tracing_spans_dropped_total.load() - before == 6);
  c.release();
  CHECK(eventually([&] { return exporter->exported() == 5; }, 1s));
}

TEST_CASE("a collector that cannot be reached counts failed spans, logs, and never blocks submit", "[tracing]") {
  const auto endpoint = "http://127.0.0.1:" + std::to_string(closed_port()) + "/v1/traces";
  auto exporter = std::make_unique<span_exporter>(options(endpoint, 5, 100, 50));
  const auto before = scg::net::global_net_stats().tracing_export_failures_total.load();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) CHECK(exporter->submit(make_span("lost")));
  CHECK(std::chrono::steady_clock::now() - t0 < 50ms);
  CHECK(eventually([&] { return exporter->failed() == 10; }, 1s));
  CHECK(scg::net::global_net_stats().tracing_export_failures_total.load() - before == 10);
  CHECK(exporter->exported() == 0);
  const auto t1 = std::chrono::steady_clock::now();
  exporter.reset();
  CHECK(std::chrono::steady_clock::now() - t1 < 500ms);
}

TEST_CASE("a collector that answers 5xx counts failures - when it recovers, spans are exported again",
          "[tracing]") {
  collector c;
  c.set_status(503);
  auto exporter = std::make_unique<span_exporter>(options(c.endpoint(), 2, 100, 50));
  exporter->submit(make_span("a"));
  exporter->submit(make_span("b"));
  CHECK(eventually([&] { return exporter->failed() == 2; }, 1s));
  c.set_status(200);
  exporter->submit(make_span("c"));
  CHECK(eventually([&] { return exporter->exported() == 1; }, 1s));
}

TEST_CASE("the exporter sends what is queued when it is destroyed", "[tracing]") {
  collector c;
  auto exporter = std::make_unique<span_exporter>(options(c.endpoint(), 10, 100, 60000));
  exporter->submit(make_span("x"));
  exporter->submit(make_span("y"));
  const auto t0 = std::chrono::steady_clock::now();
  exporter.reset();  // long before the flush interval
  CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
  auto got = c.requests(1, 0ms);
  REQUIRE(got.size() == 1);
  CHECK(got[0].size() == 2);
}

TEST_CASE("a tracing block is read with its defaults, and its errors name the field", "[tracing]") {
  using namespace scg::config;
  const std::string backends = "backends: [\"spark:15002\"]\n";
  auto off = parse(backends);
  REQUIRE(std::holds_alternative<gateway>(off));
  CHECK_FALSE(std::get<gateway>(off).tracing);

  auto on = parse(backends + "tracing: { otlp_endpoint: \"http://collector:4318/v1/traces\" }\n");
  REQUIRE(std::holds_alternative<gateway>(on));
  const auto& t = *std::get<gateway>(on).tracing;
  CHECK(t.otlp_endpoint == "http://collector:4318/v1/traces");
  CHECK(t.service_name == "scg");
  CHECK(t.queue_capacity == 2048);
  CHECK(t.batch_size == 256);
  CHECK(t.flush_interval_ms == 1000);
  CHECK(t.timeout_ms == 2000);

  auto full = parse(backends +
                    "tracing: { otlp_endpoint: \"https://[fd00::7]/v1/traces\", service_name: gw, queue_capacity: 10, "
                    "batch_size: 5, flush_interval_ms: 100, timeout_ms: 300 }\n");
  REQUIRE(std::holds_alternative<gateway>(full));
  CHECK(std::get<gateway>(full).tracing->batch_size == 5);

  auto field_of = [&](const std::string& block) {
    auto r = parse(backends + "tracing: " + block + "\n");
    return std::holds_alternative<error>(r) ? std::get<error>(r).field : std::string("(accepted)");
  };
  CHECK(field_of("{ service_name: scg }") == "tracing.otlp_endpoint");
  CHECK(field_of("{ otlp_endpoint: \"collector:4318\" }") == "tracing.otlp_endpoint");
  CHECK(field_of("{ otlp_endpoint: \"grpc://collector:4317\" }") == "tracing.otlp_endpoint");
  CHECK(field_of("{ otlp_endpoint: \"http:///v1/traces\" }") == "tracing.otlp_endpoint");
  CHECK(field_of("{ otlp_endpoint: \"http://collector:99999/v1/traces\" }") == "tracing.otlp_endpoint");
  CHECK(field_of("{ otlp_endpoint: \"http://c:4318\", batch_size: 0 }") == "tracing.batch_size");
  CHECK(field_of("{ otlp_endpoint: \"http://c:4318\", queue_capacity: -1 }") == "tracing.queue_capacity");
  CHECK(field_of("{ otlp_endpoint: \"http://c:4318\", flush_interval_ms: 0 }") == "tracing.flush_interval_ms");
  CHECK(field_of("{ otlp_endpoint: \"http://c:4318\", service_name: \"\" }") == "tracing.service_name");
  CHECK(field_of("{ otlp_endpoint: \"http://c:4318\", sampler: always }") == "tracing.sampler");
}

// Hostile HTTP/2 clients (tests/raw_h2.hpp) against a real scg: rapid resets,
// CONTINUATION floods, oversized header blocks, PING and SETTINGS floods, more
// streams than scg advertises. Each abuse runs while a well-behaved client
// makes Config and small ExecutePlan calls through the same scg; every one of
// those must succeed, quickly, and scg must stay up with bounded memory.
//
// The limits asserted are nghttp2's (scg's HTTP/2 library, Debian's 1.52 with
// its security fixes) as scg configures them today; a test that fails here
// means scg now answers an abuse differently: check that the new answer still
// protects it, then update the expectation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>

#include "tests/integration/harness.hpp"
#include "tests/raw_h2.hpp"

namespace sc = spark::connect;
namespace h2 = scg::test::raw_h2;
using namespace scg::test;

namespace {

using clock_type = std::chrono::steady_clock;

const std::string config_path = "/spark.connect.SparkConnectService/Config";
const std::string execute_path = "/spark.connect.SparkConnectService/ExecutePlan";

/// Each well-behaved call's deadline, and the bound on their p99 latency
/// (2-core, noisy machines: generous, but far below a stall).
constexpr auto call_deadline = 2s;
constexpr auto p99_bound = 500ms;
/// scg's RSS may grow at most this much over its baseline during an abuse.
constexpr long rss_margin_kib = 200 * 1024;

// What nghttp2 answers, as scg sets it up (net/h2/downstream_connection.cpp).
constexpr std::size_t advertised_streams = 1000;  ///< scg's SETTINGS_MAX_CONCURRENT_STREAMS
constexpr int reset_burst = 1000;                 ///< RST_STREAMs a connection may send at once...
constexpr int reset_rate = 33;                    ///< ...and per second after that
constexpr int max_continuations = 8;              ///< CONTINUATION frames after one HEADERS

std::string config_body(const std::string& session, const std::string& user_id) {
  sc::ConfigRequest r;
  r.set_session_id(session);
  *r.mutable_user_context() = user(user_id);
  return r.SerializeAsString();
}

std::string execute_body(const std::string& session, const std::string& user_id) {
  return execute(session, user_id).SerializeAsString();
}

long fake_stat(const fake_spark& f, const std::string& key) {
  auto [code, body] = http_get(f.ui_port, "/fake/stats");
  if (code != 200) return -1;
  return nlohmann::json::parse(body).value(key, -1L);
}

/// Nearest-rank percentile of `values` (ms); 0 for none.
double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

/// A client that does nothing wrong: on its own connection, Config and small
/// ExecutePlan calls in turn (each with a 2 s deadline), a short pause
/// between them, until stopped (at most 60 s or 20,000 calls). It also
/// samples scg's RSS every 100 ms.
class well_behaved_client {
 public:
  explicit well_behaved_client(gateway& gw) : gw_(gw), stub_(stub_to(gw.grpc_port)) {
    thread_ = std::thread([this] { run(); });
  }
  ~well_behaved_client() { stop(); }

  /// Waits up to 10 s until `n` calls have succeeded.
  bool wait_ok(int n) {
    return eventually([&] { return ok_.load() >= n || failed_.load() > 0; }, 10s) && failed_.load() == 0;
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int calls() const { return ok_.load() + failed_.load(); }

  // Read only after stop().
  int ok() const { return ok_.load(); }
  int failed() const { return failed_.load(); }
  const std::vector<std::string>& failures() const { return failures_; }
  double p99_ms() const { return percentile(latency_ms_, 0.99); }
  double max_ms() const { return latency_ms_.empty() ? 0 : *std::max_element(latency_ms_.begin(), latency_ms_.end()); }
  long max_rss_kib() const { return max_rss_kib_; }

 private:
  void run() {
    const auto until = clock_type::now() + 60s;
    auto next_sample = clock_type::now();
    for (int i = 0; i < 20000 && !stop_ && clock_type::now() < until; ++i) {
      if (clock_type::now() >= next_sample) {
        max_rss_kib_ = std::max(max_rss_kib_, gw_.proc.rss_kib());
        next_sample = clock_type::now() + 100ms;
      }
      const auto t0 = clock_type::now();
      const auto status = i % 2 ? execute() : config();
      latency_ms_.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
      if (status.ok()) {
        ++ok_;
      } else {
        ++failed_;
        if (failures_.size() < 10)
          failures_.push_back((i % 2 ? "ExecutePlan: " : "Config: ") + std::to_string(status.error_code()) + " " +
                              status.error_message());
      }
      std::this_thread::sleep_for(10ms);  // the client's pace: a short pause between calls
    }
    max_rss_kib_ = std::max(max_rss_kib_, gw_.proc.rss_kib());
  }

  grpc::Status config() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + call_deadline);
    sc::ConfigRequest req;
    req.set_session_id(uuid_of("well-behaved"));
    *req.mutable_user_context() = user("wendy");
    sc::ConfigResponse resp;
    return stub_->Config(&ctx, req, &resp);
  }

  grpc::Status execute() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + call_deadline);
    auto reader = stub_->ExecutePlan(&ctx, scg::test::execute(uuid_of("well-behaved"), "wendy"));
    sc::ExecutePlanResponse r;
    int n = 0;
    bool complete = false;
    while (reader->Read(&r)) {
      ++n;
      complete = r.has_result_complete();
    }
    auto s = reader->Finish();
    if (s.ok() && (n != 4 || !complete))  // the fake's default: 3 batches and result_complete
      return grpc::Status(grpc::StatusCode::DATA_LOSS, std::to_string(n) + " responses");
    return s;
  }

  gateway& gw_;
  std::unique_ptr<sc::SparkConnectService::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0}, failed_{0};
  std::vector<std::string> failures_;
  std::vector<double> latency_ms_;
  long max_rss_kib_ = 0;
  std::thread thread_;
};

/// One fake backend, one scg, the well-behaved client started and warmed up,
/// and scg's baseline RSS.
struct hostile_env {
  temp_dir dir;
  fake_spark fake;
  gateway gw;
  std::unique_ptr<well_behaved_client> client;
  long baseline_rss_kib = 0;
  int calls_before = 0;  ///< the client's calls when the abuse began

  explicit hostile_env(const std::string& tag)
      : fake(start_fake(dir, "fake-" + tag)), gw(start_gateway(dir, gateway_yaml({&fake}), tag)) {
    client = std::make_unique<well_behaved_client>(gw);
    REQUIRE(client->wait_ok(5));
    baseline_rss_kib = gw.proc.rss_kib();
    calls_before = client->calls();
  }

  /// After the abuse: the client made at least `min_during` calls meanwhile,
  /// each one succeeded, fast; scg lives, its memory stayed bounded, and no
  /// call is left over.
  void check_unharmed(int min_during = 5, long rss_margin = rss_margin_kib) {
    const int during = client->calls() - calls_before;
    const int at_end = client->calls();
    CHECK(eventually([&] { return client->calls() >= at_end + 3; }, 5s));  // a few calls after the abuse too
    client->stop();
    for (const auto& f : client->failures()) UNSCOPED_INFO("well-behaved call failed: " << f);
    INFO("well-behaved calls: " << client->ok() << " OK, " << client->failed() << " failed, " << during
                                << " during the abuse; p99 " << client->p99_ms() << " ms, max " << client->max_ms()
                                << " ms; scg RSS " << baseline_rss_kib << " KiB before, at most "
                                << client->max_rss_kib() << " KiB meanwhile");
    CHECK(during >= min_during);
    CHECK(client->failed() == 0);
    CHECK(client->p99_ms() < std::chrono::duration<double, std::milli>(p99_bound).count());
    CHECK_FALSE(gw.proc.wait(0ms));  // still running
    CHECK(client->max_rss_kib() < baseline_rss_kib + rss_margin);
    CHECK(gw.proc.rss_kib() < baseline_rss_kib + rss_margin);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 5s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 0);
    grpc::Status s;
    CHECK(backend_for_session(gw.grpc_port, uuid_of("after-abuse"), "ann", &s) == fake.name);
    CHECK(s.ok());
  }
};

/// How long an abuse goes on: at least `min_count` rounds and 2 s (so that
/// the well-behaved client works through it), at most `max_count` rounds
/// and 20 s.
struct abuse_budget {
  int min_count, max_count;
  clock_type::time_point start = clock_type::now();
  std::atomic<int> done{0};

  /// Claims the next round; false once the abuse is over.
  bool next() {
    const auto elapsed = clock_type::now() - start;
    const int n = done.load();
    if (n >= max_count || elapsed > 20s || (n >= min_count && elapsed > 2s)) return false;
    ++done;
    return true;
  }
};

/// Runs `n` copies of `body(thread index)` at once and joins them.
template <class F>
void in_threads(int n, F body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back([&body, t] { body(t); });
  for (auto& t : threads) t.join();
}

/// The gRPC response message scg sent on `stream` of `c`, read until the
/// stream ends (its HEADERS with END_STREAM) or `timeout`; nullopt when the
/// stream ended without a message, was reset, or timed out. `reset_code`
/// receives a RST_STREAM's code; `status_only` is set when the stream ended
/// with headers and no message (a trailers-only error answer).
std::optional<std::string> response_on(h2::connection& c, std::uint32_t stream, std::chrono::milliseconds timeout,
                                       std::optional<std::uint32_t>* reset_code = nullptr,
                                       bool* status_only = nullptr) {
  const auto until = clock_type::now() + timeout;
  std::string body;
  while (auto f = c.read_frame(until - clock_type::now())) {
    if (f->stream != stream) continue;
    if (f->type == h2::frame_type::rst_stream) {
      if (reset_code) *reset_code = f->error();
      return std::nullopt;
    }
    if (f->type == h2::frame_type::data) body += f->payload;
    if (f->type == h2::frame_type::headers && (f->flag_bits & h2::flags::end_stream)) {
      if (body.size() < 5) {  // trailers only: an error status
        if (status_only) *status_only = true;
        return std::nullopt;
      }
      return body.substr(5);
    }
  }
  return std::nullopt;
}

}  // namespace

// CVE-2023-44487: a client that opens streams and resets them at once makes
// the server start work it never finishes. nghttp2's token bucket (1000
// resets, then 33 a second) answers with GOAWAY and the connection closes.
TEST_CASE("rapid resets end each abusing connection with a GOAWAY while other clients carry on",
          "[integration][hostile]") {
  hostile_env env("rapid");
  const std::string block = h2::grpc_request_block(config_path);
  // 1250 streams per connection, on new connections from two threads at
  // once: at least 20,000 streams (and 2 s).
  constexpr int streams_per_connection = 1250, min_streams = 20000;
  struct outcome {
    int sent = 0;
    double seconds = 0;
    bool closed = false;
    std::optional<h2::frame_in> goaway;
  };
  std::vector<outcome> outcomes[2];
  std::atomic<int> streams_sent{0};
  abuse_budget budget{min_streams / streams_per_connection, 2000};
  in_threads(2, [&](int t) {
    while (budget.next()) {
      h2::connection c(env.gw.grpc_port);
      if (!c.handshake()) {
        outcomes[t].push_back({});
        continue;
      }
      outcome o;
      const auto start = clock_type::now();
      std::vector<h2::frame_in> frames;
      const std::string body = h2::grpc_message(config_body(uuid_of("rapid-" + std::to_string(t)), "rex"));
      for (int i = 0; i < streams_per_connection && !c.peer_closed(); i += 50) {
        std::string batch;
        for (int j = i; j < i + 50; ++j) {  // HEADERS, the request message, RST_STREAM(CANCEL)
          const auto s = static_cast<std::uint32_t>(2 * j + 1);
          batch += h2::headers_frame(s, block, true, false) + h2::data_frame(s, body, false) +
                   h2::rst_stream_frame(s, h2::cancel);
        }
        if (!c.send(batch)) break;
        o.sent += 50;
        c.drain(&frames);
        if (std::any_of(frames.begin(), frames.end(),
                        [](const auto& f) { return f.type == h2::frame_type::goaway; }))
          break;
      }
      streams_sent += o.sent;
      o.closed = c.wait_closed(3s, &frames);
      o.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
      for (const auto& f : frames)
        if (f.type == h2::frame_type::goaway) o.goaway = f;
      outcomes[t].push_back(std::move(o));
    }
  });
  INFO(streams_sent << " streams opened and reset");
  CHECK(streams_sent >= min_streams);
  int n = 0;
  for (const auto& per_thread : outcomes)
    for (const auto& o : per_thread) {
      INFO("connection " << n++ << ": " << o.sent << " streams sent in " << o.seconds << " s");
      REQUIRE(o.goaway);
      CHECK(o.goaway->error() == h2::internal_error);
      // The bucket's burst went through (scg does not refuse a legitimate
      // burst), then no more than its refill.
      const int taken = static_cast<int>((o.goaway->last_stream() + 1) / 2);
      CHECK(taken > reset_burst);
      CHECK(taken <= reset_burst + 1 + reset_rate * static_cast<int>(std::ceil(o.seconds)));
      CHECK(o.closed);
    }
  env.check_unharmed();
}

// CVE-2024-28182 (and the CONTINUATION floods of other servers): a header
// block that never ends. nghttp2 allows 8
// CONTINUATION frames after a HEADERS; the 9th is a connection error and scg
// closes the socket.
TEST_CASE("a CONTINUATION flood gets its connection closed at the ninth frame while other clients carry on",
          "[integration][hostile]") {
  hostile_env env("continuation");
  const std::string block = h2::grpc_request_block(config_path);
  std::string piece;
  h2::hpack_literal(piece, "x-more", "1");

  int min_during = 5;

  SECTION("8 CONTINUATION frames are allowed, the 9th closes the connection") {
    min_during = 0;
    h2::connection c(env.gw.grpc_port);
    REQUIRE(c.handshake());
    std::string frames = h2::headers_frame(1, block, false, false);
    for (int i = 0; i < max_continuations; ++i) frames += h2::continuation_frame(1, piece, false);
    REQUIRE(c.send(frames));
    CHECK_FALSE(c.wait_closed(500ms));
    (void)c.send(h2::continuation_frame(1, piece, false));
    std::vector<h2::frame_in> got;
    CHECK(c.wait_closed(2s, &got));
    for (const auto& f : got) CHECK_FALSE((f.type == h2::frame_type::headers && f.stream == 1));  // never answered
  }

  SECTION("endless CONTINUATION frames on many connections") {
    abuse_budget budget{200, 20000};
    std::atomic<int> opened{0}, closed{0}, answered{0};
    in_threads(2, [&](int) {
      std::string batch;
      for (int i = 0; i < 100; ++i) batch += h2::continuation_frame(1, piece, false);
      while (budget.next()) {
        ++opened;
        h2::connection c(env.gw.grpc_port);
        if (!c.handshake() || !c.send(h2::headers_frame(1, block, false, false))) continue;
        // Up to 10,000 frames, until scg closes (sends then fail) or 5 s.
        const auto until = clock_type::now() + 5s;
        for (int i = 0; i < 100 && !c.peer_closed() && clock_type::now() < until; ++i) {
          if (!c.send(batch)) break;
          c.drain();
        }
        std::vector<h2::frame_in> got;
        closed += c.wait_closed(2s, &got);
        answered += std::count_if(got.begin(), got.end(), [](const auto& f) {
          return f.type == h2::frame_type::headers && f.stream == 1;
        });
      }
    });
    INFO(opened << " connections sent endless CONTINUATION frames");
    CHECK(opened >= 200);
    CHECK(closed == opened);
    CHECK(answered == 0);
  }
  env.check_unharmed(min_during);
}

// scg's max_header_bytes is 64 KiB: a stream whose header block is larger is
// answered RESOURCE_EXHAUSTED (trailers only, reason headers_too_large: scg
// keeps none of the rest of the block) before any call starts, and the
// connection carries on. Spread over more frames than nghttp2's CONTINUATION
// limit, the connection is closed instead.
TEST_CASE("an oversized header block is refused and never reaches the backend", "[integration][hostile]") {
  hostile_env env("oversized");
  const long sessions_before = fake_stat(env.fake, "sessions_created");
  /// A Config request block with `bytes` of x-pad-N headers (1 KiB each).
  auto padded_block = [](std::size_t bytes) {
    std::string block = h2::grpc_request_block(config_path);
    const std::string pad(1000, 'p');
    for (int k = 0; block.size() < bytes; ++k) h2::hpack_literal(block, "x-pad-" + std::to_string(k), pad);
    return block;
  };
  // 1 MB: the largest frame scg accepts is 1 MiB (SETTINGS_MAX_FRAME_SIZE).
  const std::string mb_block = padded_block(1000 * 1000);
  const std::string normal_block = h2::grpc_request_block(config_path);

  int min_during = 0;  // the one-shot sections are checks of the exact answer, not floods

  SECTION("1 MB in one HEADERS frame, again and again on one connection per thread") {
    min_during = 5;
    abuse_budget budget{50, 20000};
    std::atomic<int> attempts{0}, refused{0}, other{0}, served{0};
    in_threads(2, [&](int t) {
      h2::connection c(env.gw.grpc_port);
      if (!c.handshake() || !(c.server_setting(h2::max_frame_size) >= mb_block.size())) return;
      std::uint32_t stream = 1;
      const std::string body = h2::grpc_message(config_body(uuid_of("oversized-" + std::to_string(t)), "olga"));
      for (; budget.next(); stream += 2) {
        ++attempts;
        if (!c.send(h2::headers_frame(stream, mb_block, true, false) + h2::data_frame(stream, body, true))) break;
        bool status_only = false;
        const bool answered = response_on(c, stream, 3s, nullptr, &status_only).has_value();
        (!answered && status_only ? refused : other) += 1;
      }
      // The same connection still serves a normal call.
      if (c.send(h2::headers_frame(stream, normal_block, true, false) +
                 h2::data_frame(stream, h2::grpc_message(config_body(uuid_of("well-behaved"), "wendy")), true))) {
        sc::ConfigResponse resp;
        auto answer = response_on(c, stream, 3s);
        served += answer && resp.ParseFromString(*answer) && resp.session_id() == uuid_of("well-behaved");
      }
    });
    INFO(attempts << " oversized header blocks sent");
    CHECK(attempts >= 50);
    CHECK(refused == attempts);
    CHECK(other == 0);
    CHECK(served == 2);
    CHECK(metric_value(env.gw.admin_port, "scg_local_replies_total{reason=\"headers_too_large\"}") == attempts);
  }

  SECTION("128 KiB in a HEADERS and 7 CONTINUATION frames") {
    const std::string block = padded_block(8 * 16000);
    h2::connection c(env.gw.grpc_port);
    REQUIRE(c.handshake());
    std::string frames;
    for (std::size_t at = 0; at < block.size(); at += 16000) {
      const auto piece = block.substr(at, 16000);
      const bool last = at + 16000 >= block.size();
      frames += at == 0 ? h2::headers_frame(1, piece, last, false) : h2::continuation_frame(1, piece, last);
    }
    REQUIRE(c.send(frames + h2::data_frame(1, h2::grpc_message(config_body(uuid_of("oversized-c"), "olga")), true)));
    bool status_only = false;
    CHECK_FALSE(response_on(c, 1, 3s, nullptr, &status_only));
    CHECK(status_only);
    REQUIRE(c.send(h2::headers_frame(3, normal_block, true, false) +
                   h2::data_frame(3, h2::grpc_message(config_body(uuid_of("well-behaved"), "wendy")), true)));
    CHECK(response_on(c, 3, 3s));
  }

  SECTION("1 MB in 16 KB frames: the connection is closed, the stream never answered") {
    h2::connection c(env.gw.grpc_port);
    REQUIRE(c.handshake());
    std::string frames;
    for (std::size_t at = 0; at < mb_block.size(); at += 16000) {
      const auto piece = mb_block.substr(at, 16000);
      const bool last = at + 16000 >= mb_block.size();
      frames += at == 0 ? h2::headers_frame(1, piece, last, false) : h2::continuation_frame(1, piece, last);
    }
    (void)c.send(frames);  // may fail part-way: scg closes early
    std::vector<h2::frame_in> got;
    CHECK(c.wait_closed(3s, &got));
    for (const auto& f : got) CHECK_FALSE((f.type == h2::frame_type::headers && f.stream == 1));
    // nghttp2 refuses the ninth CONTINUATION and scg closes at once (no GOAWAY), counting and logging why.
    // The count lands as the worker closes the connection, a moment after the client sees it.
    CHECK(eventually(metric(env.gw.admin_port, "scg_conn_protocol_errors_total") == 1, 2s));
    CHECK(metric_value(env.gw.admin_port, "scg_conn_protocol_errors_total") == 1);
  }
  // No oversized request opened a session on the backend.
  CHECK(fake_stat(env.fake, "sessions_created") == sessions_before);
  env.check_unharmed(min_during);
}

// Frames that each make the server queue an answer (PING and SETTINGS both
// want an ACK), from a client that never reads them: nghttp2 keeps at most
// 1000 unsent ACKs and then ends the session, so scg's memory stays flat.
TEST_CASE("PING and SETTINGS floods from a client that never reads end its connection, not scg's memory",
          "[integration][hostile]") {
  hostile_env env("flood");
  const bool ping = GENERATE(true, false);
  INFO((ping ? "PING" : "SETTINGS") << " flood");
  std::string batch;
  for (int i = 0; i < 1000; ++i)
    batch += ping ? h2::ping_frame(static_cast<std::uint64_t>(i))
                  : h2::settings_frame({{h2::initial_window_size, 65535u + static_cast<std::uint32_t>(i)}});
  // Four clients at once, each flooding one connection after another.
  abuse_budget budget{8, 2000};
  std::atomic<int> opened{0}, closed{0}, whole_floods{0};
  std::atomic<long> frames_sent{0};
  in_threads(4, [&](int) {
    while (budget.next()) {
      ++opened;
      h2::connection c(env.gw.grpc_port);
      if (!c.handshake()) continue;
      c.set_send_timeout(2s);  // scg no longer reading would show as a failed send, not a hang
      // Up to a million frames, within 10 s, never reading.
      const auto until = clock_type::now() + 10s;
      int i = 0;
      for (; i < 1000 && clock_type::now() < until; ++i) {
        if (!c.send(batch)) break;
        frames_sent += 1000;
      }
      whole_floods += i == 1000;
      // Closed, not merely backed up: reading now must reach the end.
      closed += c.wait_closed(3s);
    }
  });
  INFO(opened << " connections, " << frames_sent << " frames sent");
  CHECK(opened >= 8);
  CHECK(closed == opened);
  CHECK(whole_floods == 0);  // scg ended each connection before its flood did
  env.check_unharmed(5, 64 * 1024);
}

// scg advertises SETTINGS_MAX_CONCURRENT_STREAMS 1000. Streams opened before
// the client acknowledged that (its first burst) are refused one by one;
// once acknowledged, exceeding it is a connection error.
TEST_CASE("streams beyond the advertised 1000 are refused and the others are unaffected",
          "[integration][hostile]") {
  hostile_env env("streams");
  // Open ExecutePlan streams that stay open: a response a second, never read.
  const std::string block =
      h2::grpc_request_block(execute_path, {{"x-fake-responses", "1000000"}, {"x-fake-delay-ms", "1000"}});
  const std::string body = h2::grpc_message(execute_body(uuid_of("held"), "hal"));
  constexpr std::size_t opened = 1100;
  auto open_streams = [&] {
    std::string frames;
    for (std::size_t i = 0; i < opened; ++i) {
      const auto s = static_cast<std::uint32_t>(2 * i + 1);
      frames += h2::headers_frame(s, block, true, false) + h2::data_frame(s, body, false);
    }
    return frames;
  };

  SECTION("before the client acknowledged scg's SETTINGS: RST_STREAM(REFUSED_STREAM) for the extra 100") {
    h2::connection c(env.gw.grpc_port);
    REQUIRE(c.ok());
    REQUIRE(c.send_preface());
    REQUIRE(c.send(open_streams()));
    std::set<std::uint32_t> refused, other_resets, answered;
    const auto until = clock_type::now() + 10s;
    while (answered.size() < advertised_streams || refused.size() + other_resets.size() < opened - advertised_streams) {
      auto f = c.read_frame(until - clock_type::now());
      if (!f) break;
      if (f->type == h2::frame_type::rst_stream)
        (f->error() == h2::refused_stream ? refused : other_resets).insert(f->stream);
      if (f->type == h2::frame_type::headers) answered.insert(f->stream);
    }
    CHECK_FALSE(c.peer_closed());
    CHECK(other_resets.empty());
    CHECK(answered.size() == advertised_streams);
    REQUIRE(refused.size() == opened - advertised_streams);
    CHECK(*refused.begin() == 2 * advertised_streams + 1);  // the 1001st and after
    CHECK(*answered.rbegin() < *refused.begin());
    // The 1000 stay open while the well-behaved client works beside them
    // (its own ExecutePlan may be one more).
    const auto held = [&] {
      const long n = metric_value(env.gw.admin_port, "scg_forward_active_streams");
      return n == long{advertised_streams} || n == long{advertised_streams} + 1;
    };
    CHECK(held());
    const int calls = env.client->calls();
    CHECK(eventually([&] { return env.client->calls() >= calls + 50; }, 5s));
    CHECK(held());
    c.close();  // frees them all (check_unharmed waits for 0)
  }

  SECTION("after the client acknowledged them: GOAWAY(PROTOCOL_ERROR) at the 1001st stream") {
    h2::connection c(env.gw.grpc_port);
    REQUIRE(c.handshake());
    REQUIRE(c.server_setting(h2::max_concurrent_streams) == advertised_streams);
    (void)c.send(open_streams());  // may fail part-way: scg closes
    std::vector<h2::frame_in> got;
    CHECK(c.wait_closed(5s, &got));
    std::optional<h2::frame_in> goaway;
    for (const auto& f : got)
      if (f.type == h2::frame_type::goaway) goaway = f;
    REQUIRE(goaway);
    CHECK(goaway->error() == h2::protocol_error);
    CHECK(goaway->last_stream() == 2 * advertised_streams - 1);  // the 1000th was the last one taken
    const int calls = env.client->calls();
    CHECK(eventually([&] { return env.client->calls() >= calls + 20; }, 5s));
  }
  env.check_unharmed();
}

// The load generators of scg-bench: unary Config load, session opening, one
// stream, stalled readers beside well-behaved load, and h2load's request body.
// Each prints one JSON line on stdout; diagnostics go to stderr.
//
// The unary clients use the completion-queue API with one queue, one thread and
// one channel (its own TCP connection) per worker: no completion crosses threads,
// so the load generator stays much cheaper than what it measures. Every run
// reports the client's own CPU time (client_cpu_s) so that can be checked.
// `stalled` opens N raw HTTP/2 connections (tests/raw_h2.hpp) that each start
// an endless ExecutePlan and never read, then runs unary load and one stream
// reader beside them, and samples scg's RSS (/proc/PID/status).
#include "tools/bench/load.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "core/address.hpp"
#include "spark_connect.grpc.pb.h"
#include "tests/raw_h2.hpp"

namespace scg::bench {
namespace {

namespace sc = spark::connect;
namespace raw_h2 = scg::test::raw_h2;
using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

constexpr auto call_deadline = std::chrono::seconds(10);     // one unary call
constexpr auto connect_deadline = std::chrono::seconds(10);  // a worker's channel
constexpr const char* bench_user = "scg-bench";

// ------------------------------------------------------------------- helpers

double cpu_seconds_of_this_process() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double seconds_between(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

/// A random 64-bit value per run, so two runs against one server never share a session.
uint64_t run_nonce() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

/// A UUID-shaped (version 4 layout) session id, distinct for each (nonce, n).
std::string session_uuid(uint64_t nonce, uint64_t n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08" PRIx32 "-%04" PRIx32 "-4%03" PRIx32 "-a%03" PRIx32 "-%012" PRIx64,
                static_cast<uint32_t>(nonce >> 32), static_cast<uint32_t>((nonce >> 16) & 0xffff),
                static_cast<uint32_t>(nonce & 0xfff), static_cast<uint32_t>((n >> 48) & 0xfff),
                n & uint64_t{0xffffffffffff});
  return buf;
}

/// An ExecutePlan of `session` by the bench user, reattachable as PySpark
/// asks by default (a Spark server cuts and ends with result_complete only
/// such an execution).
sc::ExecutePlanRequest execute_request(const std::string& session) {
  sc::ExecutePlanRequest request;
  request.set_session_id(session);
  request.mutable_user_context()->set_user_id(bench_user);
  request.add_request_options()->mutable_reattach_options()->set_reattachable(true);
  return request;
}

/// A channel with its own TCP connection (a private subchannel pool) that takes
/// responses of any size.
std::shared_ptr<grpc::Channel> make_channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

bool connect(grpc::Channel& channel, const std::string& target) {
  if (channel.WaitForConnected(std::chrono::system_clock::now() + connect_deadline)) return true;
  std::fprintf(stderr, "scg-bench: cannot connect to %s\n", target.c_str());
  return false;
}

/// Nearest-rank percentile of sorted values; 0 for none.
uint32_t percentile(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// ------------------------------------------------------------- the Config load

/// What a load run does: how many Config calls at once, over which sessions, and
/// which completions count.
struct load_plan {
  std::string target;
  int concurrency = 1;
  int threads = 1;
  clock_type::time_point window_start;  ///< completions from here on count...
  clock_type::time_point window_end;    ///< ...until here; no call starts after it
  int64_t call_limit = -1;              ///< >= 0: no more calls than this in all
  bool session_per_call = false;        ///< else one session per slot
  double rate = 0;                      ///< > 0: call n starts no earlier than n / rate s in
  uint64_t nonce = 0;
  std::chrono::milliseconds deadline = call_deadline;  ///< of each call
};

/// What one worker saw.
struct worker_tally {
  int64_t ok = 0;            ///< OK completions inside the window
  int64_t errors = 0;        ///< non-OK completions inside the window
  int64_t completed = 0;     ///< every completion, warm-up and drain included
  int64_t errors_total = 0;  ///< every non-OK completion
  int64_t timeouts = 0;      ///< DEADLINE_EXCEEDED completions inside the window
  std::vector<uint32_t> latency_us;  ///< of the OK completions inside the window
  std::string first_error;
};

/// One call in flight; when it completes, the slot starts the next one.
struct call_slot {
  std::unique_ptr<grpc::ClientContext> ctx;
  sc::ConfigRequest request;
  sc::ConfigResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<sc::ConfigResponse>> reader;
  clock_type::time_point started;
};

/// Slots [first, last) of `plan.concurrency`, spread evenly over the workers.
std::pair<int, int> slot_range(const load_plan& plan, int worker) {
  auto edge = [&](int w) { return plan.concurrency * w / plan.threads; };
  return {edge(worker), edge(worker + 1)};
}

/// Runs one worker's slots on its own completion queue until the window closes
/// (or the call limit is reached) and its last call has completed. Every call
/// has a deadline, so this returns within plan.deadline of the window's end.
void run_worker(const load_plan& plan, int worker, sc::SparkConnectService::Stub& stub,
                std::atomic<int64_t>& issued, worker_tally& tally) {
  const auto [first, last] = slot_range(plan, worker);
  std::vector<call_slot> slots(static_cast<size_t>(last - first));
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].request.mutable_user_context()->set_user_id(bench_user);
    slots[i].request.set_session_id(session_uuid(plan.nonce, static_cast<uint64_t>(first) + i));
  }
  grpc::CompletionQueue queue;
  auto start_call = [&](size_t i) {
    const auto now = clock_type::now();
    if (now >= plan.window_end) return false;
    auto& slot = slots[i];
    if (plan.call_limit >= 0) {
      const int64_t n = issued.fetch_add(1, std::memory_order_relaxed);
      if (n >= plan.call_limit) return false;
      if (plan.rate > 0)  // paced: wait for this call's turn (completions queue meanwhile)
        std::this_thread::sleep_until(plan.window_start + std::chrono::duration_cast<clock_type::duration>(
                                                              std::chrono::duration<double>(double(n) / plan.rate)));
      if (plan.session_per_call) slot.request.set_session_id(session_uuid(plan.nonce, static_cast<uint64_t>(n)));
    }
    slot.ctx = std::make_unique<grpc::ClientContext>();
    slot.ctx->set_deadline(std::chrono::system_clock::now() + plan.deadline);
    slot.started = now;
    slot.reader = stub.PrepareAsyncConfig(slot.ctx.get(), slot.request, &queue);
    slot.reader->StartCall();
    slot.reader->Finish(&slot.response, &slot.status, reinterpret_cast<void*>(i));
    return true;
  };

  int in_flight = 0;
  for (size_t i = 0; i < slots.size(); ++i) in_flight += start_call(i) ? 1 : 0;
  while (in_flight > 0) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    --in_flight;
    const auto i = reinterpret_cast<size_t>(tag);
    auto& slot = slots[i];
    const auto now = clock_type::now();
    const bool counted = now >= plan.window_start && now < plan.window_end;
    ++tally.completed;
    if (slot.status.ok()) {
      if (counted) {
        ++tally.ok;
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - slot.started).count();
        tally.latency_us.push_back(static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)));
      }
    } else {
      ++tally.errors_total;
      if (counted) ++tally.errors;
      if (counted && slot.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) ++tally.timeouts;
      if (tally.first_error.empty())
        tally.first_error = std::to_string(slot.status.error_code()) + " " + slot.status.error_message();
    }
    if (start_call(i)) ++in_flight;
  }
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
}

/// The workers' tallies together.
struct load_outcome {
  worker_tally total;
  double wall_seconds = 0;  ///< from the first call to the last completion
  bool connected = true;
};

/// One channel (its own connection) and stub per worker.
struct load_clients {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<sc::SparkConnectService::Stub>> stubs;
};

/// Connects the workers' channels; nullopt (after a message) when one cannot.
std::optional<load_clients> connect_load(const load_plan& plan) {
  load_clients out;
  for (int w = 0; w < plan.threads; ++w) {
    out.channels.push_back(make_channel(plan.target));
    if (!connect(*out.channels.back(), plan.target)) return std::nullopt;
    out.stubs.push_back(sc::SparkConnectService::NewStub(out.channels.back()));
  }
  return out;
}

/// Runs the plan on connected clients; its window is already set.
load_outcome run_connected(const load_plan& plan, load_clients& clients) {
  load_outcome out;
  const auto start = clock_type::now();
  std::atomic<int64_t> issued{0};
  std::vector<worker_tally> tallies(static_cast<size_t>(plan.threads));
  std::vector<std::thread> workers;
  for (int w = 0; w < plan.threads; ++w)
    workers.emplace_back([&, w] { run_worker(plan, w, *clients.stubs[w], issued, tallies[w]); });
  for (auto& t : workers) t.join();
  out.wall_seconds = seconds_between(start, clock_type::now());

  for (auto& t : tallies) {
    out.total.ok += t.ok;
    out.total.errors += t.errors;
    out.total.completed += t.completed;
    out.total.errors_total += t.errors_total;
    out.total.timeouts += t.timeouts;
    out.total.latency_us.insert(out.total.latency_us.end(), t.latency_us.begin(), t.latency_us.end());
    if (out.total.first_error.empty()) out.total.first_error = t.first_error;
  }
  if (out.total.errors_total > 0)
    std::fprintf(stderr, "scg-bench: %" PRId64 " calls failed; the first: %s\n", out.total.errors_total,
                 out.total.first_error.c_str());
  return out;
}

/// Connects one channel per worker, then runs the plan, whose window is given
/// relative to the moment the connections are up.
load_outcome run_load(load_plan plan, std::chrono::duration<double> warmup,
                      std::optional<std::chrono::duration<double>> duration) {
  auto clients = connect_load(plan);
  if (!clients) {
    load_outcome out;
    out.connected = false;
    return out;
  }
  const auto start = clock_type::now();
  plan.window_start = start + std::chrono::duration_cast<clock_type::duration>(warmup);
  plan.window_end = duration ? plan.window_start + std::chrono::duration_cast<clock_type::duration>(*duration)
                             : clock_type::time_point::max();
  return run_connected(plan, *clients);
}

int default_threads(int64_t concurrency) { return static_cast<int>(std::min<int64_t>(concurrency, 2)); }

}  // namespace

int run_unary(cli_args& args) {
  load_plan plan;
  plan.target = args.text("target");
  plan.concurrency = static_cast<int>(args.number("concurrency", std::nullopt, 1));
  const auto duration = args.number("duration-secs", std::nullopt, 1);
  const auto warmup = args.number("warmup-secs", 1, 0);
  plan.threads = static_cast<int>(args.number("threads", default_threads(plan.concurrency), 1));
  if (!args.finish()) return 2;
  plan.threads = std::min(plan.threads, plan.concurrency);
  plan.nonce = run_nonce();

  const double cpu_before = cpu_seconds_of_this_process();
  auto out = run_load(plan, std::chrono::seconds(warmup), std::chrono::seconds(duration));
  if (!out.connected) return 1;
  auto& latencies = out.total.latency_us;
  std::sort(latencies.begin(), latencies.end());
  const double seconds = static_cast<double>(duration);
  json line = {{"rpcs", out.total.ok},
               {"errors", out.total.errors},
               {"rps", round_to(static_cast<double>(out.total.ok) / seconds, 1)},
               {"p50_us", percentile(latencies, 0.50)},
               {"p99_us", percentile(latencies, 0.99)},
               {"concurrency", plan.concurrency},
               {"threads", plan.threads},
               {"seconds", seconds},
               {"rpcs_total", out.total.completed},
               {"errors_total", out.total.errors_total},
               {"wall_s", round_to(out.wall_seconds, 3)},
               {"client_cpu_s", round_to(cpu_seconds_of_this_process() - cpu_before, 3)},
               {"process_cpu_s", round_to(cpu_seconds_of_this_process(), 3)}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

int run_sessions(cli_args& args) {
  load_plan plan;
  plan.target = args.text("target");
  plan.call_limit = args.number("count", std::nullopt, 1);
  plan.concurrency = static_cast<int>(args.number("concurrency", std::nullopt, 1));
  plan.threads = static_cast<int>(args.number("threads", default_threads(plan.concurrency), 1));
  plan.rate = static_cast<double>(args.number("rate", 0, 0));
  if (!args.finish()) return 2;
  plan.concurrency = static_cast<int>(std::min<int64_t>(plan.concurrency, plan.call_limit));
  plan.threads = std::min(plan.threads, plan.concurrency);
  plan.session_per_call = true;
  plan.nonce = run_nonce();

  const double cpu_before = cpu_seconds_of_this_process();
  auto out = run_load(plan, std::chrono::seconds(0), std::nullopt);
  if (!out.connected) return 1;
  json line = {{"sessions", out.total.ok},
               {"errors", out.total.errors},
               {"seconds", round_to(out.wall_seconds, 3)},
               {"rate", plan.rate},
               {"client_cpu_s", round_to(cpu_seconds_of_this_process() - cpu_before, 3)},
               {"process_cpu_s", round_to(cpu_seconds_of_this_process(), 3)}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

// ------------------------------------------------------------------- the stream

int run_stream(cli_args& args) {
  const auto target = args.text("target");
  const auto bytes = args.number("bytes", std::nullopt, 1);
  const auto message_bytes = args.number("message-bytes", std::nullopt, 1);
  const auto timeout = args.number("timeout-secs", 600, 1);
  const auto session_id = args.text("session-id", session_uuid(run_nonce(), 0));
  if (!args.finish()) return 2;
  const int64_t messages = bytes / message_bytes;
  const int64_t expected = messages * message_bytes;
  if (messages == 0) {
    std::fprintf(stderr, "scg-bench: --bytes must be at least --message-bytes\n");
    return 2;
  }
  if (expected != bytes)
    std::fprintf(stderr, "scg-bench: streaming %" PRId64 " bytes, the largest multiple of %" PRId64 "\n",
                 expected, message_bytes);

  auto channel = make_channel(target);
  if (!connect(*channel, target)) return 1;
  auto stub = sc::SparkConnectService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-fake-responses", std::to_string(messages));
  ctx.AddMetadata("x-fake-payload-bytes", std::to_string(message_bytes));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout));
  const auto request = execute_request(session_id);

  const double cpu_before = cpu_seconds_of_this_process();
  const auto start = clock_type::now();
  auto reader = stub->ExecutePlan(&ctx, request);
  sc::ExecutePlanResponse response;  // reused: its payload buffer is allocated once
  int64_t received = 0, batches = 0;
  bool complete = false;
  std::string operation_id;
  while (reader->Read(&response)) {
    if (operation_id.empty()) operation_id = response.operation_id();
    if (response.has_arrow_batch()) {
      received += static_cast<int64_t>(response.arrow_batch().data().size());
      ++batches;
    } else if (response.has_result_complete()) {
      complete = true;
    }
  }
  const auto status = reader->Finish();
  const double seconds = seconds_between(start, clock_type::now());
  if (status.ok() && !operation_id.empty()) {
    // As Spark's clients do once a result is complete: the server (and scg's
    // operation index) may forget the operation.
    grpc::ClientContext release_ctx;
    release_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sc::ReleaseExecuteRequest release;
    release.set_session_id(session_id);
    release.set_operation_id(operation_id);
    *release.mutable_user_context() = request.user_context();
    release.mutable_release_all();
    sc::ReleaseExecuteResponse released;
    if (auto s = stub->ReleaseExecute(&release_ctx, release, &released); !s.ok())
      std::fprintf(stderr, "scg-bench: ReleaseExecute failed: %d %s\n", s.error_code(), s.error_message().c_str());
  }

  std::string error;
  if (!status.ok())
    error = "status " + std::to_string(status.error_code()) + " " + status.error_message();
  else if (received != expected)
    error = "received " + std::to_string(received) + " bytes, expected " + std::to_string(expected);
  else if (!complete)
    error = "the stream ended without result_complete";
  json line = {{"bytes", received},
               {"seconds", round_to(seconds, 4)},
               {"mb_per_s", round_to(static_cast<double>(received) / 1e6 / seconds, 1)},
               {"messages", batches},
               {"message_bytes", message_bytes},
               {"client_cpu_s", round_to(cpu_seconds_of_this_process() - cpu_before, 3)},
               {"process_cpu_s", round_to(cpu_seconds_of_this_process(), 3)}};
  if (!error.empty()) line["error"] = error;
  std::printf("%s\n", line.dump().c_str());
  if (error.empty()) return 0;
  std::fprintf(stderr, "scg-bench: stream failed: %s\n", error.c_str());
  return 1;
}

namespace {

// ------------------------------------------------------------ stalled readers

/// The stalled readers' result: endless messages (a million of them), so the
/// backend always has more to send than the client takes.
constexpr int64_t stalled_responses = 1000000;

/// The port of a loopback HOST:PORT target; 0 when it is not loopback.
int loopback_port(const std::string& target) {
  const auto hp = core::parse_host_port(target);
  return hp && (hp->host == "127.0.0.1" || hp->host == "localhost") ? hp->port : 0;
}

/// VmRSS of `pid` in KiB (/proc/PID/status); 0 when unreadable.
int64_t rss_kib_of(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

/// Bytes that arrived on `fd` and were never read.
int64_t pending_bytes(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

/// True while the server has not closed `fd` (no FIN, no reset), unread data or not.
bool still_open(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 0;
}

/// Opens a raw HTTP/2 connection and starts one ExecutePlan of endless
/// `message_bytes` messages on it, advertising `window` bytes of stream and
/// connection window, then never reads. Null (after a message) on failure.
std::unique_ptr<raw_h2::connection> open_stalled_reader(int port, const std::string& session, int64_t message_bytes,
                                                        uint32_t window, int timeout_secs) {
  auto conn = std::make_unique<raw_h2::connection>(port);
  std::vector<std::pair<uint16_t, uint32_t>> settings;
  if (window != 65535) settings.push_back({raw_h2::initial_window_size, window});
  std::string why;
  if (!conn->ok()) why = "cannot connect";
  else if (!conn->handshake(settings)) why = "no SETTINGS from the server";
  if (why.empty()) {
    const auto request = execute_request(session);
    const auto block = raw_h2::grpc_request_block(
        "/spark.connect.SparkConnectService/ExecutePlan",
        {{"grpc-timeout", std::to_string(timeout_secs) + "S"},
         {"x-fake-responses", std::to_string(stalled_responses)},
         {"x-fake-payload-bytes", std::to_string(message_bytes)}});
    std::string frames;
    if (window > 65535) frames += raw_h2::window_update_frame(0, window - 65535);
    frames += raw_h2::headers_frame(1, block, true, false) +
              raw_h2::data_frame(1, raw_h2::grpc_message(request.SerializeAsString()), true);
    if (!conn->send(frames)) why = "cannot send the request";
  }
  if (why.empty()) return conn;
  std::fprintf(stderr, "scg-bench: stalled reader: %s\n", why.c_str());
  return nullptr;
}

/// What the well-behaved stream reader saw.
struct stream_tally {
  int64_t bytes = 0;  ///< payload bytes received inside the window
  int64_t ok = 0, errors = 0, timeouts = 0;
  std::string first_error;
};

/// Reads ExecutePlan results of `messages` x `message_bytes` back to back
/// until `stop` is set (which also cancels the call in flight), counting the
/// payload bytes that arrive inside the window. Each stream has a deadline.
class stream_reader {
 public:
  stream_reader(std::shared_ptr<grpc::Channel> channel, int64_t messages, int64_t message_bytes, uint64_t nonce)
      : stub_(sc::SparkConnectService::NewStub(std::move(channel))),
        messages_(messages),
        message_bytes_(message_bytes),
        session_(session_uuid(nonce, uint64_t{1} << 40)) {}

  /// Streams one result after another (each with `deadline`) until stop()
  /// or the window's end.
  void run(clock_type::time_point window_start, clock_type::time_point window_end, std::chrono::seconds deadline) {
    while (!stopping_ && clock_type::now() < window_end) {
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-fake-responses", std::to_string(messages_));
      ctx.AddMetadata("x-fake-payload-bytes", std::to_string(message_bytes_));
      ctx.set_deadline(std::chrono::system_clock::now() + deadline);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) break;
        current_ = &ctx;
      }
      auto reader = stub_->ExecutePlan(&ctx, execute_request(session_));
      sc::ExecutePlanResponse response;
      std::string operation_id;
      while (reader->Read(&response)) {
        if (operation_id.empty()) operation_id = response.operation_id();
        const auto now = clock_type::now();
        if (response.has_arrow_batch() && now >= window_start && now < window_end)
          tally_.bytes += static_cast<int64_t>(response.arrow_batch().data().size());
      }
      const auto status = reader->Finish();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        current_ = nullptr;
      }
      if (status.ok()) {
        ++tally_.ok;
        release(operation_id);
      } else if (stopping_ && status.error_code() == grpc::StatusCode::CANCELLED) {
        break;  // ours, at the window's end
      } else {
        ++(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? tally_.timeouts : tally_.errors);
        if (tally_.first_error.empty())
          tally_.first_error = std::to_string(status.error_code()) + " " + status.error_message();
      }
    }
  }

  /// Ends run(): no new stream, and the one in flight is cancelled.
  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (current_) current_->TryCancel();
  }

  const stream_tally& tally() const { return tally_; }

 private:
  /// As Spark's clients do once a result is complete.
  void release(const std::string& operation_id) {
    if (operation_id.empty()) return;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    sc::ReleaseExecuteRequest release;
    release.set_session_id(session_);
    release.set_operation_id(operation_id);
    release.mutable_user_context()->set_user_id(bench_user);
    release.mutable_release_all();
    sc::ReleaseExecuteResponse released;
    (void)stub_->ReleaseExecute(&ctx, release, &released);
  }

  std::unique_ptr<sc::SparkConnectService::Stub> stub_;
  int64_t messages_, message_bytes_;
  std::string session_;
  std::mutex mutex_;
  grpc::ClientContext* current_ = nullptr;
  std::atomic<bool> stopping_{false};
  stream_tally tally_;
};

/// Samples a process's VmRSS every 100 ms until stopped: the highest value.
class rss_sampler {
 public:
  explicit rss_sampler(int64_t pid) : pid_(pid) {
    if (pid_ <= 0) return;
    thread_ = std::thread([this] {
      while (!stop_) {
        max_ = std::max<int64_t>(max_, rss_kib_of(pid_));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~rss_sampler() { stop(); }
  int64_t stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (pid_ > 0) max_ = std::max<int64_t>(max_, rss_kib_of(pid_));
    return max_;
  }

 private:
  int64_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_{0};
  std::thread thread_;
};

}  // namespace

/// N stalled readers, then well-behaved load beside them: unary Config at
/// --concurrency and one stream reader, for the window; scg's RSS meanwhile.
int run_stalled(cli_args& args) {
  load_plan plan;
  plan.target = args.text("target");
  const auto stalled = args.number("stalled", std::nullopt, 0);
  const auto duration = args.number("duration-secs", std::nullopt, 1);
  const auto warmup = args.number("warmup-secs", 1, 0);
  plan.concurrency = static_cast<int>(args.number("concurrency", 32, 1));
  plan.threads = static_cast<int>(args.number("threads", default_threads(plan.concurrency), 1));
  plan.deadline = std::chrono::milliseconds(args.number("deadline-ms", 2000, 1));
  const auto message_bytes = args.number("message-bytes", 4 << 20, 1);
  const auto stream_bytes = args.number("stream-bytes", 256 << 20, 1);
  const auto settle = args.number("settle-secs", 2, 0);
  const auto pid = args.number("scg-pid", 0, 0);
  const auto window = args.number("stalled-window", 65535, 65535);
  if (!args.finish()) return 2;
  const int port = loopback_port(plan.target);
  if (port <= 0 || window > 0x7fffffff) {
    std::fprintf(stderr, "scg-bench: stalled readers need a 127.0.0.1:PORT target and a window below 2^31\n");
    return 2;
  }
  plan.threads = std::min(plan.threads, plan.concurrency);
  plan.nonce = run_nonce();
  const double cpu_before = cpu_seconds_of_this_process();

  rss_sampler sampler(pid);
  const int64_t rss_before = pid > 0 ? rss_kib_of(pid) : 0;
  // The stalled readers' calls outlive the run (the connections close first).
  const int call_secs = static_cast<int>(settle + warmup + duration + 60);
  std::vector<std::unique_ptr<raw_h2::connection>> readers;
  const auto open_until = clock_type::now() + std::chrono::seconds(30);
  for (int64_t i = 0; i < stalled && clock_type::now() < open_until; ++i)
    if (auto r = open_stalled_reader(port, session_uuid(plan.nonce, uint64_t{1} << 41 | uint64_t(i)), message_bytes,
                                     static_cast<uint32_t>(window), call_secs))
      readers.push_back(std::move(r));
  std::this_thread::sleep_for(std::chrono::seconds(settle));  // the backend fills what scg lets it
  int64_t started = 0, pending = 0;
  for (const auto& r : readers) {
    const auto n = pending_bytes(r->fd());
    started += n > 0;
    pending += n;
  }
  const int64_t rss_settled = pid > 0 ? rss_kib_of(pid) : 0;

  auto clients = connect_load(plan);
  auto stream_channel = make_channel(plan.target);
  if (!clients || !connect(*stream_channel, plan.target)) return 1;
  const auto start = clock_type::now();
  plan.window_start = start + std::chrono::seconds(warmup);
  plan.window_end = plan.window_start + std::chrono::seconds(duration);
  stream_reader streams(stream_channel, std::max<int64_t>(1, stream_bytes / message_bytes), message_bytes, plan.nonce);
  std::thread stream_thread([&] {
    streams.run(plan.window_start, plan.window_end, std::chrono::seconds(warmup + duration + 10));
  });
  auto out = run_connected(plan, *clients);
  std::this_thread::sleep_until(plan.window_end);
  streams.stop();
  stream_thread.join();

  int64_t open_at_end = 0;
  for (const auto& r : readers) open_at_end += still_open(r->fd());
  const int64_t rss_max = sampler.stop();
  const auto opened = static_cast<int64_t>(readers.size());
  readers.clear();

  auto& latencies = out.total.latency_us;
  std::sort(latencies.begin(), latencies.end());
  const auto& st = streams.tally();
  const double seconds = static_cast<double>(duration);
  json line = {{"stalled", stalled},
               {"stalled_opened", opened},
               {"stalled_started", started},
               {"stalled_pending_bytes", pending},
               {"stalled_open_at_end", open_at_end},
               {"rpcs", out.total.ok},
               {"errors", out.total.errors},
               {"timeouts", out.total.timeouts},
               {"rps", round_to(static_cast<double>(out.total.ok) / seconds, 1)},
               // null when no call succeeded (all failed or timed out)
               {"p50_us", latencies.empty() ? json(nullptr) : json(percentile(latencies, 0.50))},
               {"p99_us", latencies.empty() ? json(nullptr) : json(percentile(latencies, 0.99))},
               {"stream_bytes", st.bytes},
               {"mb_per_s", round_to(static_cast<double>(st.bytes) / 1e6 / seconds, 1)},
               {"streams", st.ok},
               {"stream_errors", st.errors},
               {"stream_timeouts", st.timeouts},
               {"concurrency", plan.concurrency},
               {"deadline_ms", plan.deadline.count()},
               {"message_bytes", message_bytes},
               {"stalled_window", window},
               {"duration_s", duration},
               {"rss_before_kib", rss_before},
               {"rss_settled_kib", rss_settled},
               {"rss_max_kib", rss_max},
               {"client_cpu_s", round_to(cpu_seconds_of_this_process() - cpu_before, 3)},
               {"process_cpu_s", round_to(cpu_seconds_of_this_process(), 3)}};
  if (!out.total.first_error.empty()) line["first_error"] = out.total.first_error;
  if (!st.first_error.empty()) line["stream_first_error"] = st.first_error;
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

// ------------------------------------------------------------- the h2load body

/// Writes one gRPC-framed ConfigRequest (the 5-byte prefix: uncompressed flag and
/// big-endian length, then the message) for h2load's `-d FILE`. Every h2load
/// request then carries the same session, so this names one session id per file.
int run_frame_config(cli_args& args) {
  const auto out_path = args.text("out");
  const auto session_id = args.text("session-id", session_uuid(run_nonce(), 0));
  if (!args.finish()) return 2;
  sc::ConfigRequest request;
  request.set_session_id(session_id);
  request.mutable_user_context()->set_user_id(bench_user);
  std::string body;
  if (!request.SerializeToString(&body)) {
    std::fprintf(stderr, "scg-bench: cannot serialize the ConfigRequest\n");
    return 1;
  }
  const auto length = static_cast<uint32_t>(body.size());
  const char prefix[5] = {0, static_cast<char>(length >> 24), static_cast<char>(length >> 16),
                          static_cast<char>(length >> 8), static_cast<char>(length)};
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out.write(prefix, sizeof prefix);
  out << body;
  if (!out) {
    std::fprintf(stderr, "scg-bench: cannot write %s\n", out_path.c_str());
    return 1;
  }
  json line = {{"file", out_path}, {"bytes", body.size() + sizeof prefix}, {"session_id", session_id}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace scg::bench

// scg-bench: the load generator and report behind scripts/bench.sh.
//
//   scg-bench unary    --target HOST:PORT --concurrency N --duration-secs S
//                      [--warmup-secs W] [--threads T]
//   scg-bench stream   --target HOST:PORT --bytes B --message-bytes M [--timeout-secs S] [--session-id ID]
//   scg-bench sessions --target HOST:PORT --count N --concurrency C [--threads T] [--rate PER_S]
//   scg-bench stalled  --target 127.0.0.1:PORT --stalled N --duration-secs S [--warmup-secs W]
//                      [--concurrency C] [--threads T] [--deadline-ms D] [--message-bytes M]
//                      [--stream-bytes B] [--settle-secs X] [--scg-pid PID] [--stalled-window W]
//   scg-bench frame-config --out FILE [--session-id ID]
//   scg-bench report   --raw FILE [--json FILE] [--markdown FILE]
//
// Each load subcommand prints one JSON line on stdout; diagnostics go to stderr.
// The unary clients use the completion-queue API with one queue, one thread and
// one channel (its own TCP connection) per worker: no completion crosses threads,
// so the load generator stays much cheaper than what it measures. Every run
// reports the client's own CPU time (client_cpu_s) so that can be checked.
// `stalled` opens N raw HTTP/2 connections (tests/raw_h2.hpp) that each start
// an endless ExecutePlan and never read, then runs unary load and one stream
// reader beside them, and samples scg's RSS (/proc/PID/status).
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
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
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

constexpr const char* usage =
    "usage: scg-bench unary    --target HOST:PORT --concurrency N --duration-secs S\n"
    "                          [--warmup-secs W] [--threads T]\n"
    "       scg-bench stream   --target HOST:PORT --bytes B --message-bytes M [--timeout-secs S] [--session-id ID]\n"
    "       scg-bench sessions --target HOST:PORT --count N --concurrency C [--threads T] [--rate PER_S]\n"
    "       scg-bench stalled  --target 127.0.0.1:PORT --stalled N --duration-secs S [--warmup-secs W]\n"
    "                          [--concurrency C] [--threads T] [--deadline-ms D] [--message-bytes M]\n"
    "                          [--stream-bytes B] [--settle-secs X] [--scg-pid PID] [--stalled-window W]\n"
    "       scg-bench frame-config --out FILE [--session-id ID]\n"
    "       scg-bench report   --raw FILE [--json FILE] [--markdown FILE]\n";

// ------------------------------------------------------------------ arguments

/// `--name value` and `--name=value` pairs. Readers record the first problem in
/// `error`; `finish` adds flags nobody asked for.
struct cli_args {
  std::map<std::string, std::string> values;
  std::set<std::string> read;
  std::string error;

  static cli_args parse(int argc, char** argv, int first) {
    cli_args out;
    for (int i = first; i < argc; ++i) {
      std::string flag = argv[i];
      if (flag.rfind("--", 0) != 0) {
        out.fail("unexpected argument " + flag);
        continue;
      }
      if (auto eq = flag.find('='); eq != std::string::npos) {
        out.values[flag.substr(2, eq - 2)] = flag.substr(eq + 1);
      } else if (i + 1 < argc) {
        out.values[flag.substr(2)] = argv[++i];
      } else {
        out.fail(flag + " needs a value");
      }
    }
    return out;
  }

  void fail(const std::string& message) {
    if (error.empty()) error = message;
  }

  std::string text(const std::string& name, std::optional<std::string> fallback = std::nullopt) {
    read.insert(name);
    auto it = values.find(name);
    if (it != values.end()) return it->second;
    if (!fallback) fail("--" + name + " is required");
    return fallback.value_or("");
  }

  /// A decimal integer >= `min`; 0 after recording an error.
  int64_t number(const std::string& name, std::optional<int64_t> fallback, int64_t min) {
    read.insert(name);
    auto it = values.find(name);
    if (it == values.end()) {
      if (!fallback) fail("--" + name + " is required");
      return fallback.value_or(0);
    }
    try {
      size_t used = 0;
      const long long value = std::stoll(it->second, &used);
      if (used == it->second.size() && value >= min) return value;
    } catch (const std::exception&) {
    }
    fail("--" + name + " wants an integer >= " + std::to_string(min) + ", got '" + it->second + "'");
    return 0;
  }

  /// True when every flag was read and valid; prints the problem otherwise.
  bool finish() {
    for (const auto& [name, value] : values)
      if (!read.count(name)) fail("unknown flag --" + name);
    if (error.empty()) return true;
    std::fprintf(stderr, "scg-bench: %s\n%s", error.c_str(), usage);
    return false;
  }
};

// ------------------------------------------------------------------- helpers

double cpu_seconds_of_this_process() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double round_to(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
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
  sc::ExecutePlanRequest request;
  request.set_session_id(session_id);
  request.mutable_user_context()->set_user_id(bench_user);

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
    sc::ExecutePlanRequest request;
    request.set_session_id(session);
    request.mutable_user_context()->set_user_id(bench_user);
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
      sc::ExecutePlanRequest request;
      request.set_session_id(session_);
      request.mutable_user_context()->set_user_id(bench_user);
      auto reader = stub_->ExecutePlan(&ctx, request);
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

// ------------------------------------------------------------------- the report
//
// bench.sh appends one JSON object per line to a raw file:
//   {"kind":"meta", ...}                       the machine and the settings
//   {"kind":"unary"|"h2load"|"stream","case":C,"path":P,"round":R, <load line>, <cpu fields>}
//     P is direct, scg, before (BENCH_SCG_BEFORE's scg), nginx or haproxy; for streams
//     R numbers samples (several per round). h2load lines carry rps, p50_us, p99_us,
//     rpcs (h2load's "succeeded"), errors, rpcs_total, started, and client_cpu_s
//     (h2load's CPU, from bash's `times`).
//   {"kind":"idle", "scg_idle_cores":..., "seconds":...}   scg's CPU before any load
//   {"kind":"memory", "path":P, "max_rss_kib":..., "hwm_kib":...}   a middle box under load
//   {"kind":"sessions", <sessions line>, "rss_before_kib":..., "rss_after_kib":...}
//   {"kind":"replication", "replicas", "sessions", "errors", "open_s", "visible_s"}
//   {"kind":"soak_sample", "t_s", "rss_kib"} and {"kind":"soak", "seconds", ...}
//   {"kind":"stalled", "round":R, "stream_window_bytes", <stalled line>, <cpu fields>}
//     one per N of BENCH_STALLED and round, on a fresh scg; "error" instead when
//     scg-bench stalled itself failed
// <cpu fields> are middle_cpu_s (scg, before, nginx's master and workers, or haproxy; 0 for
// direct), fake_cpu_s, box_busy_s (all CPUs) and run_wall_s of the run, and
// backend_config_calls: the Config calls the fake counted meanwhile (-1: unknown).
// Older raw files (scg_cpu_s, scg_max_rss_kib) are read too.

/// Median and range of a few samples.
struct spread {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};

/// Non-finite values (a figure a run could not measure) are left out.
spread spread_of(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  spread out;
  out.n = values.size();
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  out.median = values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
  out.min = values.front();
  out.max = values.back();
  return out;
}

json to_json(const spread& s, int digits) {
  if (s.n == 0) return nullptr;
  return {{"median", round_to(s.median, digits)}, {"min", round_to(s.min, digits)},
          {"max", round_to(s.max, digits)}, {"n", s.n}};
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

/// "1234 (1200–1300)"; "–" when there are no samples.
std::string show(const spread& s, int digits) {
  if (s.n == 0) return "–";
  if (s.n == 1) return fixed(s.median, digits);
  return fixed(s.median, digits) + " (" + fixed(s.min, digits) + "–" + fixed(s.max, digits) + ")";
}

/// The median alone; "–" when there are no samples.
std::string show_median(const spread& s, int digits) { return s.n ? fixed(s.median, digits) : "–"; }

double num(const json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// `before` is an older scg binary (BENCH_SCG_BEFORE), only in runs that had it.
const std::vector<std::string> path_order = {"direct", "scg", "before", "nginx", "haproxy"};
/// The ratios the report shows, numerator first; each is paired per round.
const std::vector<std::pair<std::string, std::string>> ratio_pairs = {
    {"scg", "direct"}, {"scg", "before"}, {"scg", "nginx"},
    {"scg", "haproxy"}, {"nginx", "direct"}, {"haproxy", "direct"}};

/// The runs of one case: path -> round -> record.
struct case_runs {
  std::string name, kind, label;
  std::map<std::string, std::map<int, json>> paths;
  bool unary() const { return kind != "stream"; }
  const std::map<int, json>* runs(const std::string& path) const {
    auto it = paths.find(path);
    return it == paths.end() ? nullptr : &it->second;
  }
};

/// One table row: a label per column and its values.
using row = std::vector<std::string>;
using metric_fn = std::function<double(const json&)>;

std::string markdown_table(const row& header, const std::vector<row>& rows) {
  auto line = [](const row& cells) {
    std::string out = "|";
    for (const auto& c : cells) out += " " + c + " |";
    return out + "\n";
  };
  std::string out = line(header);
  out += "|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

/// Column widths count code points, so "–" and "µ" do not shift the columns.
size_t display_width(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xc0) != 0x80 ? 1 : 0;
  return n;
}

std::string text_table(const row& header, const std::vector<row>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const row& r) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], display_width(r[i]));
  };
  measure(header);
  for (const auto& r : rows) measure(r);
  auto line = [&](const row& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size() && i < width.size()) out += std::string(width[i] - display_width(r[i]) + 2, ' ');
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& r : rows) out += line(r);
  return out;
}

/// Per-round values of `metric` for one path; none when the path did not run.
std::vector<double> values(const std::map<int, json>* runs, const metric_fn& metric) {
  std::vector<double> out;
  if (runs)
    for (const auto& [round, record] : *runs) out.push_back(metric(record));
  return out;
}

/// a/b of `metric`, paired round by round.
std::vector<double> ratios(const case_runs& c, const std::string& a, const std::string& b, const metric_fn& metric) {
  std::vector<double> out;
  const auto *top = c.runs(a), *bottom = c.runs(b);
  if (!top || !bottom) return out;
  for (const auto& [round, record] : *top) {
    auto other = bottom->find(round);
    if (other == bottom->end()) continue;
    const double base = metric(other->second);
    if (base > 0 && std::isfinite(base)) out.push_back(metric(record) / base);
  }
  return out;
}

const double not_measured = std::numeric_limits<double>::quiet_NaN();

double middle_cpu(const json& r) { return r.contains("middle_cpu_s") ? num(r, "middle_cpu_s") : num(r, "scg_cpu_s"); }

/// The load generator's CPU (scg-bench's process_cpu_s also covers its start-up
/// and connecting); not measured in old raw files without it.
double client_cpu(const json& r) {
  if (r.contains("process_cpu_s")) return num(r, "process_cpu_s");
  if (r.contains("client_cpu_s")) return num(r, "client_cpu_s");
  return not_measured;
}

/// `cpu` per 100k calls (unary) or per GiB (stream).
double per_work(const json& r, double cpu, bool unary) {
  const double work = unary ? num(r, "rpcs_total") / 1e5 : num(r, "bytes") / double(1 << 30);
  return work > 0 ? cpu / work : not_measured;
}

/// CPU the rest of the machine spent during a run, in cores: everything busy
/// minus the middle box, the fake and the client.
double foreign_cores(const json& r) {
  const double wall = num(r, "run_wall_s");
  const double client = client_cpu(r);
  if (wall <= 0 || !std::isfinite(client)) return not_measured;
  return std::max(0.0, num(r, "box_busy_s") - middle_cpu(r) - num(r, "fake_cpu_s") - client) / wall;
}

/// The per-kind figures: throughput and its unit, digits, and how CPU is counted.
struct figures {
  metric_fn throughput, middle_cpu_per_work, chain_cpu_per_work, fake_cores, client_cores;
  std::string unit, cpu_unit;
};

figures figures_for(bool unary) {
  figures f;
  f.throughput = [unary](const json& r) { return num(r, unary ? "rps" : "mb_per_s"); };
  f.middle_cpu_per_work = [unary](const json& r) {
    return r.value("path", "") == "direct" ? not_measured : per_work(r, middle_cpu(r), unary);
  };
  f.chain_cpu_per_work = [unary](const json& r) {
    return per_work(r, middle_cpu(r) + num(r, "fake_cpu_s") + client_cpu(r), unary);
  };
  f.fake_cores = [](const json& r) {
    const double wall = num(r, "run_wall_s");
    return wall > 0 ? num(r, "fake_cpu_s") / wall : not_measured;
  };
  f.client_cores = [](const json& r) {
    const double wall = num(r, "wall_s") > 0 ? num(r, "wall_s") : num(r, "seconds");
    return wall > 0 && r.contains("client_cpu_s") ? num(r, "client_cpu_s") / wall : not_measured;
  };
  f.unit = unary ? " rps" : " MB/s";
  f.cpu_unit = unary ? " s/100k" : " s/GiB";
  return f;
}

/// Cumulative Prometheus buckets, [le, count] pairs as scraped; +Inf last.
using buckets = std::vector<std::pair<double, double>>;

buckets parse_buckets(const json& pairs) {
  buckets out;
  for (const auto& p : pairs) {
    const auto le = p.at(0).get<std::string>();
    out.emplace_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le), p.at(1).get<double>());
  }
  return out;
}

/// The buckets of `after` minus `before`, added up over replicas: what was
/// observed in between, everywhere.
buckets bucket_delta(const json& before, const json& after) {
  buckets sum;
  for (size_t r = 0; r < after.size(); ++r) {
    auto a = parse_buckets(after[r]);
    auto b = r < before.size() ? parse_buckets(before[r]) : buckets{};
    if (sum.empty()) sum.assign(a.size(), {0, 0});
    for (size_t i = 0; i < a.size() && i < sum.size(); ++i)
      sum[i] = {a[i].first, sum[i].second + a[i].second - (i < b.size() ? b[i].second : 0)};
  }
  return sum;
}

/// The q-quantile of cumulative buckets, interpolated linearly inside its
/// bucket as Prometheus's histogram_quantile does; the highest finite bound
/// when it falls above it; NaN when empty.
double bucket_quantile(const buckets& b, double q) {
  if (b.empty() || b.back().second <= 0) return not_measured;
  const double rank = q * b.back().second;
  double lower = 0, below = 0;
  for (const auto& [le, count] : b) {
    if (count >= rank) {
      if (!std::isfinite(le)) return lower;
      return count > below ? lower + (le - lower) * (rank - below) / (count - below) : le;
    }
    lower = std::isfinite(le) ? le : lower;
    below = count;
  }
  return lower;
}

/// What the report collects from the raw file.
struct raw_records {
  json meta = json::object(), idle = json::object(), sessions = json::object(), replication = json::object(),
       replication_delay = json::object(), sync = json::object(), soak = json::object();
  std::map<std::string, json> memory;  ///< by path
  std::vector<json> soak_samples;
  std::vector<json> stalled;  ///< stalled-readers runs, every N and round
  std::vector<case_runs> cases;
};

std::optional<raw_records> read_raw(const std::string& raw_path) {
  std::ifstream raw(raw_path);
  if (!raw) {
    std::fprintf(stderr, "scg-bench: cannot read %s\n", raw_path.c_str());
    return std::nullopt;
  }
  raw_records out;
  std::string text_line;
  for (int line_no = 1; std::getline(raw, text_line); ++line_no) {
    if (text_line.empty()) continue;
    auto record = json::parse(text_line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      std::fprintf(stderr, "scg-bench: %s:%d is not a JSON object\n", raw_path.c_str(), line_no);
      return std::nullopt;
    }
    const auto kind = record.value("kind", "");
    if (kind == "meta") out.meta = record;
    else if (kind == "idle") out.idle = record;
    else if (kind == "sessions") out.sessions = record;
    else if (kind == "replication") out.replication = record;
    else if (kind == "replication_delay") out.replication_delay = record;
    else if (kind == "sync") out.sync = record;
    else if (kind == "soak") out.soak = record;
    else if (kind == "soak_sample") out.soak_samples.push_back(record);
    else if (kind == "stalled") out.stalled.push_back(record);
    else if (kind == "memory" && record.contains("path")) out.memory[record.value("path", "")] = record;
    else if (kind == "memory")  // before the other paths existed
      out.memory["scg"] = {{"max_rss_kib", num(record, "scg_max_rss_kib")}, {"hwm_kib", num(record, "scg_hwm_kib")}};
    else if (kind == "unary" || kind == "h2load" || kind == "stream") {
      const auto name = record.value("case", kind);
      auto it = std::find_if(out.cases.begin(), out.cases.end(), [&](const case_runs& c) { return c.name == name; });
      if (it == out.cases.end()) {
        out.cases.push_back({name, kind, record.value("label", name), {}});
        it = std::prev(out.cases.end());
      }
      it->paths[record.value("path", "")][record.value("round", 0)] = record;
    }
    out.meta.erase("kind");
  }
  for (auto* j : {&out.idle, &out.sessions, &out.replication, &out.replication_delay, &out.sync, &out.soak})
    j->erase("kind");
  return out;
}

/// Warnings about the trustworthiness of the figures: failed calls, a load
/// generator whose count the backend does not confirm, a backend that is no
/// faster than the proxies in front of it, other load on the machine.
std::vector<std::string> check_runs(const raw_records& raw) {
  std::vector<std::string> warnings;
  for (const auto& c : raw.cases) {
    if (!c.unary()) continue;
    for (const auto& [path, runs] : c.paths)
      for (const auto& [round, r] : runs) {
        const std::string where = c.label + " via " + path + " round " + std::to_string(round) + ": ";
        const double backend = r.contains("backend_config_calls") ? num(r, "backend_config_calls") : -1;
        if (c.kind == "h2load") {
          // h2load counts a gRPC error (HTTP 200 with a grpc-status) as a success:
          // only the backend's own count shows whether the calls reached it.
          if (backend >= 0 && backend < num(r, "rpcs"))
            warnings.push_back("MISMATCH " + where + "h2load counted " + fixed(num(r, "rpcs"), 0) +
                               " successes, the backend answered only " + fixed(backend, 0) + " Config calls");
          if (num(r, "errors") > 0) warnings.push_back(where + "h2load saw " + fixed(num(r, "errors"), 0) + " failed requests");
          continue;
        }
        const double answered = num(r, "rpcs_total") - num(r, "errors_total");
        if ((backend >= 0 && backend < answered) || num(r, "errors_total") > 0)
          warnings.push_back(where + fixed(num(r, "errors_total"), 0) + " failed calls, backend counted " +
                             fixed(backend, 0) + " for " + fixed(answered, 0) + " answered");
      }
    // The backend must not be the bottleneck: direct well above every proxy.
    const auto f = figures_for(c.unary());
    const auto direct = spread_of(values(c.runs("direct"), f.throughput));
    for (const auto& path : path_order) {
      if (path == "direct") continue;
      const auto via = spread_of(values(c.runs(path), f.throughput));
      if (direct.n && via.n && direct.median < 1.2 * via.median)
        warnings.push_back(c.label + ": direct (" + fixed(direct.median, 0) + ") is not well above " + path + " (" +
                           fixed(via.median, 0) + "): the backend or the client may be the bottleneck");
    }
  }
  if (num(raw.sessions, "errors") > 0) warnings.push_back(fixed(num(raw.sessions, "errors"), 0) + " session opens failed");
  if (num(raw.replication, "errors") > 0)
    warnings.push_back(fixed(num(raw.replication, "errors"), 0) + " session opens failed in the replication run");
  if (!raw.replication.empty() && raw.replication.value("complete", true) == false)
    warnings.push_back("replication: the other replica never showed every binding within the time limit");
  for (const auto& r : raw.stalled) {
    const std::string where = "stalled readers N=" + fixed(num(r, "stalled"), 0) + " round " +
                              std::to_string(r.value("round", 0)) + ": ";
    if (r.contains("error")) {
      warnings.push_back(where + r.value("error", ""));
      continue;
    }
    const double unary_failed = num(r, "errors"), stream_failed = num(r, "stream_errors") + num(r, "stream_timeouts");
    if (unary_failed > 0 || stream_failed > 0 || num(r, "stream_bytes") <= 0)
      warnings.push_back(where + fixed(unary_failed, 0) + " unary calls failed (" + fixed(num(r, "timeouts"), 0) +
                         " timed out), " + fixed(stream_failed, 0) + " streams failed, stream " +
                         fixed(num(r, "mb_per_s"), 1) + " MB/s: the well-behaved clients starved");
    if (num(r, "stalled_started") < num(r, "stalled"))
      warnings.push_back(where + "only " + fixed(num(r, "stalled_started"), 0) + " of " + fixed(num(r, "stalled"), 0) +
                         " stalled readers got their stream started");
  }
  if (num(raw.meta, "quick") > 0) warnings.push_back("quick mode: a smoke test, too short to judge the aims");
  std::vector<double> foreign;
  for (const auto& c : raw.cases)
    for (const auto& [path, runs] : c.paths)
      for (const auto& [round, r] : runs) foreign.push_back(foreign_cores(r));
  const auto s_foreign = spread_of(foreign);
  if (s_foreign.n && s_foreign.median > 0.3)
    warnings.push_back("other work on the machine took " + fixed(s_foreign.median, 2) +
                       " cores (median over runs): the figures are disturbed");
  return warnings;
}

/// The report's tables, each with its header, and the JSON beside them.
struct report_tables {
  std::vector<std::pair<row, std::vector<row>>> tables;
  json report;
};

/// Per path and per ratio, for every case.
std::pair<row, std::vector<row>> detail_table(const raw_records& raw, json& cases_json) {
  const row header = {"workload", "path", "throughput", "p50 µs", "p99 µs", "errors", "middle-box CPU",
                      "chain CPU", "fake cores", "client cores", "foreign cores"};
  const metric_fn p50 = [](const json& r) { return num(r, "p50_us"); };
  const metric_fn p99 = [](const json& r) { return num(r, "p99_us"); };
  const metric_fn errors = [](const json& r) { return num(r, "errors"); };
  std::vector<row> rows;
  for (const auto& c : raw.cases) {
    const auto f = figures_for(c.unary());
    json entry = {{"case", c.name}, {"label", c.label}, {"kind", c.kind}, {"paths", json::object()},
                  {"ratios", json::object()}};
    for (const auto& path : path_order) {
      const auto* runs = c.runs(path);
      if (!runs) continue;
      const auto s_tp = spread_of(values(runs, f.throughput)), s_p50 = spread_of(values(runs, p50)),
                 s_p99 = spread_of(values(runs, p99)), s_mid = spread_of(values(runs, f.middle_cpu_per_work)),
                 s_chain = spread_of(values(runs, f.chain_cpu_per_work)),
                 s_fake = spread_of(values(runs, f.fake_cores)), s_client = spread_of(values(runs, f.client_cores)),
                 s_foreign = spread_of(values(runs, foreign_cores));
      double error_sum = 0;
      for (double e : values(runs, errors)) error_sum += e;
      json p = {{c.unary() ? "rps" : "mb_per_s", to_json(s_tp, 1)},
                {"errors", error_sum},
                {c.unary() ? "middle_cpu_s_per_100k_rpcs" : "middle_cpu_s_per_gib", to_json(s_mid, 3)},
                {c.unary() ? "chain_cpu_s_per_100k_rpcs" : "chain_cpu_s_per_gib", to_json(s_chain, 3)},
                {"fake_cpu_cores", to_json(s_fake, 2)},
                {"client_cpu_cores", to_json(s_client, 2)},
                {"foreign_cpu_cores", to_json(s_foreign, 2)}};
      if (c.unary()) {
        p["p50_us"] = to_json(s_p50, 0);
        p["p99_us"] = to_json(s_p99, 0);
      }
      entry["paths"][path] = p;
      rows.push_back({c.label, path, show(s_tp, 0) + f.unit, c.unary() ? show(s_p50, 0) : "",
                      c.unary() ? show(s_p99, 0) : "", fixed(error_sum, 0),
                      s_mid.n ? show(s_mid, 2) + f.cpu_unit : "–", s_chain.n ? show(s_chain, 2) + f.cpu_unit : "–",
                      show(s_fake, 2), show(s_client, 2), show(s_foreign, 2)});
    }
    for (const auto& [a, b] : ratio_pairs) {
      const auto r_tp = spread_of(ratios(c, a, b, f.throughput));
      if (!r_tp.n) continue;
      const auto r_p50 = spread_of(ratios(c, a, b, p50)), r_p99 = spread_of(ratios(c, a, b, p99)),
                 r_cpu = spread_of(ratios(c, a, b, f.middle_cpu_per_work));
      json r = {{c.unary() ? "rps" : "mb_per_s", to_json(r_tp, 3)}};
      if (c.unary()) {
        r["p50_us"] = to_json(r_p50, 3);
        r["p99_us"] = to_json(r_p99, 3);
      }
      if (r_cpu.n) r["middle_cpu"] = to_json(r_cpu, 3);
      entry["ratios"][a + "/" + b] = r;
      rows.push_back({c.label, a + "/" + b, show(r_tp, 2), c.unary() ? show(r_p50, 2) : "",
                      c.unary() ? show(r_p99, 2) : "", "", r_cpu.n ? show(r_cpu, 2) : "", "", "", "", ""});
    }
    cases_json.push_back(entry);
  }
  return {header, rows};
}

/// One line per workload and resource: every path's medians and the ratios
/// (`before` and its ratio only when the run had that path).
std::pair<row, std::vector<row>> summary_table(const raw_records& raw, const json& report) {
  const bool before = raw.memory.count("before") ||
                      std::any_of(raw.cases.begin(), raw.cases.end(),
                                  [](const case_runs& c) { return c.runs("before") != nullptr; });
  std::vector<std::string> paths;
  for (const auto& p : path_order)
    if (p != "before" || before) paths.push_back(p);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [a, b] : ratio_pairs)
    if (!(a == "haproxy" && b == "direct") && (b != "before" || before)) pairs.emplace_back(a, b);
  row header = {"workload"};
  for (const auto& p : paths) header.push_back(p);
  for (const auto& [a, b] : pairs) header.push_back(a + "/" + b);
  std::vector<row> rows;
  auto add = [&](const std::string& label, const std::function<std::string(const std::string&)>& at,
                 const std::function<std::string(const std::string&, const std::string&)>& ratio) {
    row r = {label};
    for (const auto& p : paths) r.push_back(at(p));
    for (const auto& [a, b] : pairs) r.push_back(ratio(a, b));
    rows.push_back(r);
  };
  for (const auto& c : raw.cases) {
    const auto f = figures_for(c.unary());
    add(c.label + (c.unary() ? " rps" : " MB/s"),
        [&](const std::string& p) { return show_median(spread_of(values(c.runs(p), f.throughput)), 0); },
        [&](const std::string& a, const std::string& b) { return show_median(spread_of(ratios(c, a, b, f.throughput)), 2); });
    if (c.unary())
      add(c.label + " p99 µs",
          [&](const std::string& p) {
            return show_median(spread_of(values(c.runs(p), [](const json& r) { return num(r, "p99_us"); })), 0);
          },
          [&](const std::string& a, const std::string& b) {
            return show_median(spread_of(ratios(c, a, b, [](const json& r) { return num(r, "p99_us"); })), 2);
          });
    add(c.label + " middle CPU" + f.cpu_unit,
        [&](const std::string& p) { return show_median(spread_of(values(c.runs(p), f.middle_cpu_per_work)), 2); },
        [&](const std::string& a, const std::string& b) {
          return show_median(spread_of(ratios(c, a, b, f.middle_cpu_per_work)), 2);
        });
  }
  if (!raw.memory.empty()) {
    auto peak = [&](const std::string& p) -> std::optional<double> {
      auto it = raw.memory.find(p);
      if (it == raw.memory.end()) return std::nullopt;
      return std::max(num(it->second, "max_rss_kib"), num(it->second, "hwm_kib")) / 1024;
    };
    add("peak RSS under load MiB",
        [&](const std::string& p) { return peak(p) ? fixed(*peak(p), 1) : "–"; },
        [&](const std::string& a, const std::string& b) {
          return peak(a) && peak(b) && *peak(b) > 0 ? fixed(*peak(a) / *peak(b), 2) : "–";
        });
  }
  auto scg_only = [&](const std::string& label, const std::string& value) {
    add(label, [&](const std::string& p) { return p == "scg" ? value : "–"; },
        [](const std::string&, const std::string&) { return std::string("–"); });
  };
  if (report.contains("sessions"))
    scg_only("RSS per idle session KiB", fixed(report["sessions"].value("kib_per_session", 0.0), 2));
  if (report.contains("replication"))
    scg_only("replicated bindings/s", fixed(report["replication"].value("bindings_per_s", 0.0), 0));
  return {header, rows};
}

/// The stalled-readers runs, one row per N: the well-behaved load and its
/// ratio to N = 0 of the same round, and scg's RSS against the bound
/// N x (stream window + one response message) + its RSS at N = 0.
std::pair<row, std::vector<row>> stalled_table(const raw_records& raw, json& report) {
  std::map<int64_t, std::map<int, json>> by_n;  // N -> round -> record
  for (const auto& r : raw.stalled)
    if (!r.contains("error")) by_n[static_cast<int64_t>(num(r, "stalled"))][r.value("round", 0)] = r;
  const std::map<int, json>* base = by_n.count(0) ? &by_n[0] : nullptr;
  const metric_fn rps = [](const json& r) { return num(r, "rps"); };
  const metric_fn p99_ms = [](const json& r) {
    return r.contains("p99_us") && r["p99_us"].is_number() ? num(r, "p99_us") / 1000 : not_measured;
  };
  const metric_fn mb_per_s = [](const json& r) { return num(r, "mb_per_s"); };
  /// metric(N) / metric(0), round by round.
  auto vs_base = [&](const std::map<int, json>& runs, const metric_fn& metric) {
    std::vector<double> out;
    if (!base) return out;
    for (const auto& [round, r] : runs) {
      auto b = base->find(round);
      if (b == base->end()) continue;
      const double v = metric(r), bv = metric(b->second);
      if (bv > 0 && std::isfinite(bv) && std::isfinite(v)) out.push_back(v / bv);
    }
    return out;
  };
  const row header = {"stalled readers", "unary rps", "× N=0", "unary p99 ms", "× N=0", "unary failed (timed out)",
                      "stream MB/s", "× N=0", "streams done / failed", "scg RSS max", "bound", "RSS",
                      "stalled started / open at end"};
  std::vector<row> rows;
  report["stalled"] = json::array();
  for (const auto& [n, runs] : by_n) {
    const auto s_rps = spread_of(values(&runs, rps)), s_p99 = spread_of(values(&runs, p99_ms)),
               s_mbs = spread_of(values(&runs, mb_per_s));
    const auto r_rps = spread_of(vs_base(runs, rps)), r_p99 = spread_of(vs_base(runs, p99_ms)),
               r_mbs = spread_of(vs_base(runs, mb_per_s));
    double unary_failed = 0, timeouts = 0, streams_done = 0, stream_failed = 0;
    double started = num(runs.begin()->second, "stalled"), open_at_end = started;
    // The round whose RSS is highest, with its own bound; within only if every round is.
    double rss_max = 0, bound_at_max = not_measured;
    bool within = true, bound_known = base != nullptr;
    for (const auto& [round, r] : runs) {
      unary_failed += num(r, "errors");
      timeouts += num(r, "timeouts");
      streams_done += num(r, "streams");
      stream_failed += num(r, "stream_errors") + num(r, "stream_timeouts");
      started = std::min(started, num(r, "stalled_started"));
      open_at_end = std::min(open_at_end, num(r, "stalled_open_at_end"));
      const double window = r.contains("stream_window_bytes") ? num(r, "stream_window_bytes") : double(4 << 20);
      const double rss = num(r, "rss_max_kib") / 1024;
      double bound = not_measured;
      if (base && base->count(round))
        bound = static_cast<double>(n) * (window + num(r, "message_bytes")) / 1048576 +
                num(base->at(round), "rss_max_kib") / 1024;
      else
        bound_known = false;
      if (std::isfinite(bound) && rss > bound) within = false;
      if (rss >= rss_max) rss_max = rss, bound_at_max = bound;
    }
    const std::string verdict = !bound_known ? "–" : within ? "within" : "OVER";
    report["stalled"].push_back({{"stalled", n},
                                 {"rounds", runs.size()},
                                 {"rps", to_json(s_rps, 1)},
                                 {"rps_vs_0", to_json(r_rps, 3)},
                                 {"p99_ms", to_json(s_p99, 2)},
                                 {"p99_vs_0", to_json(r_p99, 3)},
                                 {"unary_failed", unary_failed},
                                 {"unary_timeouts", timeouts},
                                 {"mb_per_s", to_json(s_mbs, 1)},
                                 {"mb_per_s_vs_0", to_json(r_mbs, 3)},
                                 {"streams_done", streams_done},
                                 {"streams_failed", stream_failed},
                                 {"rss_max_mib", round_to(rss_max, 1)},
                                 {"rss_bound_mib", std::isfinite(bound_at_max) ? json(round_to(bound_at_max, 1))
                                                                               : json(nullptr)},
                                 {"rss_within_bound", bound_known ? json(within) : json(nullptr)},
                                 {"stalled_started", started},
                                 {"stalled_open_at_end", open_at_end}});
    rows.push_back({"N=" + std::to_string(n), show(s_rps, 0), n ? show(r_rps, 2) : "",
                    s_p99.n ? show(s_p99, 1) : "none OK", n ? show(r_p99, 2) : "",
                    fixed(unary_failed, 0) + " (" + fixed(timeouts, 0) + ")", show(s_mbs, 0), n ? show(r_mbs, 2) : "",
                    fixed(streams_done, 0) + " / " + fixed(stream_failed, 0), fixed(rss_max, 1) + " MiB",
                    std::isfinite(bound_at_max) && n ? fixed(bound_at_max, 1) + " MiB" : "", n ? verdict : "baseline",
                    n ? fixed(started, 0) + " / " + fixed(open_at_end, 0) : ""});
  }
  return {header, rows};
}

/// Growth of scg's RSS over a soak: the first minute against the last.
std::pair<row, std::vector<row>> soak_table(const raw_records& raw, json& report) {
  std::vector<double> first, last;
  double end = 0;
  for (const auto& s : raw.soak_samples) end = std::max(end, num(s, "t_s"));
  const double window = std::min(60.0, end / 2);  // short soaks: halves
  for (const auto& s : raw.soak_samples) {
    if (num(s, "t_s") <= window) first.push_back(num(s, "rss_kib") / 1024);
    if (num(s, "t_s") >= end - window) last.push_back(num(s, "rss_kib") / 1024);
  }
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // Least-squares slope over every sample, in MiB per minute.
  double slope = 0;
  {
    double st = 0, sv = 0, n = 0;
    for (const auto& s : raw.soak_samples) st += num(s, "t_s"), sv += num(s, "rss_kib") / 1024, n += 1;
    double cov = 0, var = 0;
    for (const auto& s : raw.soak_samples) {
      const double dt = num(s, "t_s") - st / n;
      cov += dt * (num(s, "rss_kib") / 1024 - sv / n);
      var += dt * dt;
    }
    if (var > 0) slope = cov / var * 60;
  }
  const double a = mean(first), b = mean(last), growth = b - a;
  const double ma = median(first), mb = median(last);
  const auto all = spread_of([&] {
    std::vector<double> v;
    for (const auto& s : raw.soak_samples) v.push_back(num(s, "rss_kib") / 1024);
    return v;
  }());
  report["soak"] = raw.soak;
  report["soak"]["rss_first_window_mib"] = round_to(a, 1);
  report["soak"]["rss_last_window_mib"] = round_to(b, 1);
  report["soak"]["rss_growth_mib"] = round_to(growth, 1);
  report["soak"]["rss_growth_pct"] = round_to(a > 0 ? growth / a * 100 : 0, 1);
  report["soak"]["rss_max_mib"] = round_to(all.max, 1);
  report["soak"]["rss_first_window_median_mib"] = round_to(ma, 1);
  report["soak"]["rss_last_window_median_mib"] = round_to(mb, 1);
  report["soak"]["rss_slope_mib_per_min"] = round_to(slope, 3);
  report["soak"]["window_s"] = round_to(window, 0);
  report["soak"]["samples"] = raw.soak_samples.size();
  const std::string w = fixed(window, 0) + " s";
  std::vector<row> rows = {
      {"soak length", fixed(num(raw.soak, "seconds"), 0) + " s, " + std::to_string(raw.soak_samples.size()) + " RSS samples"},
      {"unary calls OK (failed)", fixed(num(raw.soak, "unary_rpcs"), 0) + " (" + fixed(num(raw.soak, "unary_errors"), 0) + ")"},
      {"streams OK (failed)", fixed(num(raw.soak, "streams"), 0) + " (" + fixed(num(raw.soak, "stream_failures"), 0) + ")"},
      {"scg RSS, mean of the first " + w, fixed(a, 1) + " MiB"},
      {"scg RSS, mean of the last " + w, fixed(b, 1) + " MiB"},
      {"growth", (growth >= 0 ? "+" : "") + fixed(growth, 1) + " MiB (" + fixed(a > 0 ? growth / a * 100 : 0, 1) + " %)"},
      // Medians leave out samples taken while a stream's windows were full.
      {"scg RSS, median of the first / last " + w, fixed(ma, 1) + " / " + fixed(mb, 1) + " MiB"},
      {"least-squares slope over all samples", fixed(slope, 3) + " MiB per minute"},
      {"scg RSS max", fixed(all.max, 1) + " MiB"}};
  return {{"soak", "value"}, rows};
}

int run_report(cli_args& args) {
  const auto raw_path = args.text("raw");
  const auto json_path = args.text("json", "");
  const auto markdown_path = args.text("markdown", "");
  if (!args.finish()) return 2;
  const auto parsed = read_raw(raw_path);
  if (!parsed) return 1;
  const auto& raw = *parsed;

  json report = {{"meta", raw.meta}, {"cases", json::array()}};
  const auto warnings = check_runs(raw);
  report["warnings"] = warnings;
  std::vector<std::pair<row, std::vector<row>>> tables;
  if (!raw.cases.empty()) tables.push_back(detail_table(raw, report["cases"]));

  // Memory, sessions, replication.
  std::vector<row> resource_rows;
  if (!raw.idle.empty()) {
    report["scg_idle_cores"] = num(raw.idle, "scg_idle_cores");
    resource_rows.push_back({"scg CPU while idle", fixed(num(raw.idle, "scg_idle_cores"), 3) + " cores"});
  }
  for (const auto& path : path_order) {
    auto it = raw.memory.find(path);
    if (it == raw.memory.end()) continue;
    const double max_rss = num(it->second, "max_rss_kib"), hwm = num(it->second, "hwm_kib");
    report["memory"][path] = {{"max_rss_mib", round_to(max_rss / 1024, 1)}, {"hwm_mib", round_to(hwm / 1024, 1)}};
    resource_rows.push_back({path + " RSS under load: sampled max VmRSS / VmHWM",
                             fixed(max_rss / 1024, 1) + " / " + fixed(hwm / 1024, 1) + " MiB"});
  }
  std::optional<double> kib_per_session;
  if (!raw.sessions.empty()) {
    const auto& s = raw.sessions;
    const double opened = num(s, "sessions"), before = num(s, "rss_before_kib"), after = num(s, "rss_after_kib");
    if (opened > 0) kib_per_session = (after - before) / opened;
    report["sessions"] = {{"opened", opened},
                          {"errors", num(s, "errors")},
                          {"seconds", num(s, "seconds")},
                          {"rss_before_mib", round_to(before / 1024, 1)},
                          {"rss_after_mib", round_to(after / 1024, 1)},
                          {"kib_per_session", round_to(kib_per_session.value_or(0), 2)}};
    resource_rows.push_back({"idle sessions opened via scg (errors)", fixed(opened, 0) + " (" +
                                                                          fixed(num(s, "errors"), 0) + ") in " +
                                                                          fixed(num(s, "seconds"), 1) + " s"});
    resource_rows.push_back({"scg RSS before → after", fixed(before / 1024, 1) + " → " + fixed(after / 1024, 1) + " MiB"});
    resource_rows.push_back({"RSS per idle session", fixed(kib_per_session.value_or(0), 2) + " KiB"});
  }
  if (!raw.replication.empty()) {
    const auto& r = raw.replication;
    const double n = num(r, "sessions"), visible = num(r, "visible_s");
    report["replication"] = r;
    report["replication"]["bindings_per_s"] = round_to(visible > 0 ? n / visible : 0, 1);
    report["replication"]["lag_after_last_open_s"] = round_to(std::max(0.0, visible - num(r, "open_s")), 3);
    resource_rows.push_back({"replication: new bindings on replica 1 seen on replica 2",
                             fixed(n, 0) + " in " + fixed(visible, 2) + " s = " +
                                 fixed(visible > 0 ? n / visible : 0, 0) + " bindings/s (" +
                                 fixed(num(r, "replicas"), 0) + " replicas; opening took " +
                                 fixed(num(r, "open_s"), 2) + " s, lag after the last " +
                                 fixed(std::max(0.0, visible - num(r, "open_s")), 2) + " s)"});
  }
  std::optional<double> delay_p99_ms, sync_s, bytes_per_entry;
  if (!raw.replication_delay.empty()) {
    const auto& d = raw.replication_delay;
    const auto delta = bucket_delta(d.value("before", json::array()), d.value("after", json::array()));
    const double p50 = bucket_quantile(delta, 0.5) * 1000, p99 = bucket_quantile(delta, 0.99) * 1000;
    const double observed = delta.empty() ? 0 : delta.back().second;
    if (std::isfinite(p99)) delay_p99_ms = p99;
    report["replication_delay"] = {{"rate", num(d, "rate")},         {"sessions", num(d, "sessions")},
                                   {"errors", num(d, "errors")},     {"observed", observed},
                                   {"p50_ms", round_to(p50, 2)},     {"p99_ms", round_to(p99, 2)}};
    resource_rows.push_back({"binding visible at the other replicas, p50 / p99",
                             fixed(p50, 1) + " / " + fixed(p99, 1) + " ms (" + fixed(num(d, "rate"), 0) +
                                 " new sessions/s, " + fixed(observed, 0) + " arrivals over " +
                                 fixed(num(d, "replicas"), 0) + " replicas)"});
  }
  if (!raw.sync.empty()) {
    const auto& y = raw.sync;
    const double entries = num(y, "entries"), rss = num(y, "rss_kib"), empty = num(y, "empty_rss_kib");
    if (y.contains("ready_s") && y["ready_s"].is_number()) sync_s = num(y, "ready_s");
    if (entries > 0) bytes_per_entry = (rss - empty) * 1024 / entries;
    report["sync"] = y;
    report["sync"]["rss_bytes_per_entry"] = round_to(bytes_per_entry.value_or(0), 1);
    resource_rows.push_back({"full sync to a joining replica: entries, time to ready",
                             fixed(entries, 0) + " in " + (sync_s ? fixed(*sync_s, 2) + " s" : std::string("never"))});
    resource_rows.push_back({"bytes received until ready (from all peers by the end)",
                             fixed(num(y, "bytes_until_ready") / 1048576, 1) + " MiB (" +
                                 fixed(num(y, "bytes_all_peers") / 1048576, 1) + " MiB), " +
                                 fixed(entries > 0 ? num(y, "bytes_until_ready") / entries : 0, 0) + " bytes per entry"});
    resource_rows.push_back({"joined replica's RSS over an empty one, per entry",
                             fixed(rss / 1024, 1) + " − " + fixed(empty / 1024, 1) + " MiB = " +
                                 fixed(bytes_per_entry.value_or(0), 0) + " bytes"});
    if (y.contains("heap_bytes") && y["heap_bytes"].is_number() && entries > 0) {
      const double heap = num(y, "heap_bytes"), empty_heap = num(y, "empty_heap_bytes");
      report["sync"]["heap_bytes_per_entry"] = round_to((heap - empty_heap) / entries, 1);
      resource_rows.push_back({"joined replica's live heap over an empty one, per entry",
                               fixed(heap / 1048576, 1) + " − " + fixed(empty_heap / 1048576, 1) + " MiB = " +
                                   fixed((heap - empty_heap) / entries, 0) + " bytes"});
    }
  }
  if (!resource_rows.empty()) tables.push_back({{"resources", "value"}, resource_rows});
  if (!raw.soak_samples.empty()) tables.push_back(soak_table(raw, report));
  if (!raw.stalled.empty()) tables.push_back(stalled_table(raw, report));

  // The aims.
  std::optional<double> unary32_ratio, stream_ratio, rss_mib;
  for (const auto& c : raw.cases) {
    const auto r = spread_of(ratios(c, "scg", "direct", figures_for(c.unary()).throughput));
    if (!r.n) continue;
    if (c.kind == "stream") stream_ratio = r.median;
    else if (c.kind == "unary" && c.runs("direct") && c.runs("direct")->begin()->second.value("concurrency", 0) == 32)
      unary32_ratio = r.median;
  }
  if (auto it = raw.memory.find("scg"); it != raw.memory.end())
    rss_mib = std::max(num(it->second, "max_rss_kib"), num(it->second, "hwm_kib")) / 1024;
  std::vector<row> aim_rows;
  auto aim = [&](const std::string& name, std::optional<double> measured, double limit, bool at_least,
                 const std::string& unit, int digits) {
    if (!measured) return;
    const bool met = at_least ? *measured >= limit : *measured <= limit;
    const double margin = at_least ? *measured / limit - 1 : 1 - *measured / limit;  // > 0: headroom
    report["aims"].push_back({{"aim", name}, {"measured", round_to(*measured, 3)}, {"limit", limit},
                              {"met", met}, {"margin", round_to(margin, 3)}});
    aim_rows.push_back({name, fixed(*measured, digits) + unit, (at_least ? "≥ " : "≤ ") + fixed(limit, digits) + unit,
                        met ? "met" : "MISSED", (margin >= 0 ? "+" : "") + fixed(margin * 100, 1) + " %"});
  };
  // Issue #2's aims (against direct), then issue #5's (against nginx, same run).
  aim("unary c=32 via scg / direct", unary32_ratio, 0.4, true, "×", 2);
  aim("stream via scg / direct", stream_ratio, 0.65, true, "×", 2);
  aim("scg peak RSS under load", rss_mib, 64, false, " MiB", 1);
  aim("RSS per idle session", kib_per_session, 2, false, " KiB", 2);
  aim("binding visible at other replicas, p99", delay_p99_ms, 10, false, " ms", 1);
  aim("full sync of the entries", sync_s, 2, false, " s", 2);
  aim("memory per replicated entry", bytes_per_entry, 300, false, " B", 0);
  auto vs_nginx = [&](const std::string& kind, int concurrency, const metric_fn& metric) -> std::optional<double> {
    for (const auto& c : raw.cases) {
      if (c.kind != kind || !c.runs("scg") || !c.runs("nginx")) continue;
      if (kind == "unary" && c.runs("scg")->begin()->second.value("concurrency", 0) != concurrency) continue;
      const auto r = spread_of(ratios(c, "scg", "nginx", metric));
      if (r.n) return r.median;
    }
    return std::nullopt;
  };
  const metric_fn rps = [](const json& r) { return num(r, "rps"); };
  const metric_fn p99_us = [](const json& r) { return num(r, "p99_us"); };
  const metric_fn mb_per_s = [](const json& r) { return num(r, "mb_per_s"); };
  const metric_fn cpu_per_gib = figures_for(false).middle_cpu_per_work;
  aim("unary c=1 via scg / nginx", vs_nginx("unary", 1, rps), 0.9, true, "×", 2);
  aim("unary c=32 via scg / nginx", vs_nginx("unary", 32, rps), 1.2, true, "×", 2);
  aim("unary c=256 via scg / nginx", vs_nginx("unary", 256, rps), 1.2, true, "×", 2);
  aim("unary c=32 p99, scg / nginx", vs_nginx("unary", 32, p99_us), 1.0, false, "×", 2);
  aim("unary c=256 p99, scg / nginx", vs_nginx("unary", 256, p99_us), 1.0, false, "×", 2);
  aim("stream MB/s, scg / nginx", vs_nginx("stream", 0, mb_per_s), 1.0, true, "×", 2);
  aim("stream CPU per GiB, scg / nginx", vs_nginx("stream", 0, cpu_per_gib), 1.0, false, "×", 2);
  aim("RSS per idle session (issue #5)", kib_per_session, 1, false, " KiB", 2);
  if (!aim_rows.empty()) tables.push_back({{"aim", "measured", "target", "verdict", "margin"}, aim_rows});

  // Last, the one table to read: medians of every path and the ratios.
  if (!raw.cases.empty()) {
    auto summary = summary_table(raw, report);
    for (const auto& r : summary.second) {
      json line = json::object();
      for (size_t i = 0; i < r.size() && i < summary.first.size(); ++i) line[summary.first[i]] = r[i];
      report["summary"].push_back(line);
    }
    tables.push_back(summary);
  }

  if (raw.meta.value("mode", "") == "soak")
    std::printf("scg soak %s\n\n", raw.meta.value("date", "?").c_str());
  else
    std::printf("scg bench %s, %s rounds, medians (min–max); ratios paired per round\n\n",
                raw.meta.value("date", "?").c_str(), raw.meta.contains("rounds") ? raw.meta["rounds"].dump().c_str() : "?");
  for (size_t i = 0; i < tables.size(); ++i) {
    if (i + 1 == tables.size() && !raw.cases.empty()) std::printf("SUMMARY (medians; ratios of throughput and latency are a/b, of CPU a/b too)\n");
    std::printf("%s\n", text_table(tables[i].first, tables[i].second).c_str());
  }
  for (const auto& w : warnings) std::printf("WARNING: %s\n", w.c_str());

  if (!json_path.empty()) {
    std::ofstream out(json_path, std::ios::trunc);
    out << report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "scg-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (!markdown_path.empty()) {
    std::ofstream out(markdown_path, std::ios::trunc);
    out << "# scg bench " << raw.meta.value("date", "") << "\n\n";
    for (const auto& [key, value] : raw.meta.items())
      out << "- " << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    out << "\nMedians over rounds (streams: over all samples), (min–max) in brackets; ratios are paired "
           "per round or sample. Middle-box CPU is scg, nginx (master + workers) or haproxy.";
    if (raw.meta.contains("scg_before_sha256"))
      out << " `before` is BENCH_SCG_BEFORE's scg binary (scg_before_sha256), started as scg.";
    out << "\n\n";
    for (const auto& [header, rows] : tables) out << markdown_table(header, rows) << "\n";
    for (const auto& w : warnings) out << "\n**Warning:** " << w << "\n";
    if (!out) {
      std::fprintf(stderr, "scg-bench: cannot write %s\n", markdown_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace scg::bench

int main(int argc, char** argv) {
  using namespace scg::bench;
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::fputs(usage, stdout);
    return 0;
  }
  auto args = cli_args::parse(argc, argv, 2);
  if (command == "unary") return run_unary(args);
  if (command == "stream") return run_stream(args);
  if (command == "sessions") return run_sessions(args);
  if (command == "stalled") return run_stalled(args);
  if (command == "frame-config") return run_frame_config(args);
  if (command == "report") return run_report(args);
  std::fprintf(stderr, "scg-bench: unknown command %s\n%s", command.c_str(), usage);
  return 2;
}

// scg-bench: the load generator and report behind scripts/bench.sh.
//
//   scg-bench unary    --target HOST:PORT --concurrency N --duration-secs S
//                      [--warmup-secs W] [--threads T]
//   scg-bench stream   --target HOST:PORT --bytes B --message-bytes M [--timeout-secs S]
//   scg-bench sessions --target HOST:PORT --count N --concurrency C [--threads T]
//   scg-bench report   --raw FILE [--json FILE] [--markdown FILE]
//
// Each load subcommand prints one JSON line on stdout; diagnostics go to stderr.
// The unary clients use the completion-queue API with one queue, one thread and
// one channel (its own TCP connection) per worker: no completion crosses threads,
// so the load generator stays much cheaper than what it measures. Every run
// reports the client's own CPU time (client_cpu_s) so that can be checked.
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
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "spark_connect.grpc.pb.h"

namespace scg::bench {
namespace {

namespace sc = spark::connect;
using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

constexpr auto call_deadline = std::chrono::seconds(10);     // one unary call
constexpr auto connect_deadline = std::chrono::seconds(10);  // a worker's channel
constexpr const char* bench_user = "scg-bench";

constexpr const char* usage =
    "usage: scg-bench unary    --target HOST:PORT --concurrency N --duration-secs S\n"
    "                          [--warmup-secs W] [--threads T]\n"
    "       scg-bench stream   --target HOST:PORT --bytes B --message-bytes M [--timeout-secs S]\n"
    "       scg-bench sessions --target HOST:PORT --count N --concurrency C [--threads T]\n"
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
  uint64_t nonce = 0;
};

/// What one worker saw.
struct worker_tally {
  int64_t ok = 0;            ///< OK completions inside the window
  int64_t errors = 0;        ///< non-OK completions inside the window
  int64_t completed = 0;     ///< every completion, warm-up and drain included
  int64_t errors_total = 0;  ///< every non-OK completion
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
/// has a deadline, so this returns within call_deadline of the window's end.
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
      if (plan.session_per_call) slot.request.set_session_id(session_uuid(plan.nonce, static_cast<uint64_t>(n)));
    }
    slot.ctx = std::make_unique<grpc::ClientContext>();
    slot.ctx->set_deadline(std::chrono::system_clock::now() + call_deadline);
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

/// Connects one channel per worker, then runs the plan, whose window is given
/// relative to the moment the connections are up.
load_outcome run_load(load_plan plan, std::chrono::duration<double> warmup,
                      std::optional<std::chrono::duration<double>> duration) {
  load_outcome out;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<sc::SparkConnectService::Stub>> stubs;
  for (int w = 0; w < plan.threads; ++w) {
    channels.push_back(make_channel(plan.target));
    if (!connect(*channels.back(), plan.target)) {
      out.connected = false;
      return out;
    }
    stubs.push_back(sc::SparkConnectService::NewStub(channels.back()));
  }

  const auto start = clock_type::now();
  plan.window_start = start + std::chrono::duration_cast<clock_type::duration>(warmup);
  plan.window_end = duration ? plan.window_start + std::chrono::duration_cast<clock_type::duration>(*duration)
                             : clock_type::time_point::max();
  std::atomic<int64_t> issued{0};
  std::vector<worker_tally> tallies(static_cast<size_t>(plan.threads));
  std::vector<std::thread> workers;
  for (int w = 0; w < plan.threads; ++w)
    workers.emplace_back([&, w] { run_worker(plan, w, *stubs[w], issued, tallies[w]); });
  for (auto& t : workers) t.join();
  out.wall_seconds = seconds_between(start, clock_type::now());

  for (auto& t : tallies) {
    out.total.ok += t.ok;
    out.total.errors += t.errors;
    out.total.completed += t.completed;
    out.total.errors_total += t.errors_total;
    out.total.latency_us.insert(out.total.latency_us.end(), t.latency_us.begin(), t.latency_us.end());
    if (out.total.first_error.empty()) out.total.first_error = t.first_error;
  }
  if (out.total.errors_total > 0)
    std::fprintf(stderr, "scg-bench: %" PRId64 " calls failed; the first: %s\n", out.total.errors_total,
                 out.total.first_error.c_str());
  return out;
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
  request.set_session_id(session_uuid(run_nonce(), 0));
  request.mutable_user_context()->set_user_id(bench_user);

  const double cpu_before = cpu_seconds_of_this_process();
  const auto start = clock_type::now();
  auto reader = stub->ExecutePlan(&ctx, request);
  sc::ExecutePlanResponse response;  // reused: its payload buffer is allocated once
  int64_t received = 0, batches = 0;
  bool complete = false;
  while (reader->Read(&response)) {
    if (response.has_arrow_batch()) {
      received += static_cast<int64_t>(response.arrow_batch().data().size());
      ++batches;
    } else if (response.has_result_complete()) {
      complete = true;
    }
  }
  const auto status = reader->Finish();
  const double seconds = seconds_between(start, clock_type::now());

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

// ------------------------------------------------------------------- the report
//
// bench.sh appends one JSON object per line to a raw file:
//   {"kind":"meta", ...}                       the machine and the settings
//   {"kind":"unary","case":C,"path":"direct"|"scg","round":R, <unary line>, <cpu fields>}
//   {"kind":"stream","case":C,"path":...,"round":R, <stream line>, <cpu fields>}
//     (for streams R numbers samples: several direct/scg pairs per round)
//   {"kind":"idle", "scg_idle_cores":..., "seconds":...}   scg's CPU before any load
//   {"kind":"memory", "scg_max_rss_kib":..., "scg_hwm_kib":...}
//   {"kind":"sessions", <sessions line>, "rss_before_kib":..., "rss_after_kib":...}
// <cpu fields> are scg_cpu_s, fake_cpu_s, box_busy_s (all CPUs) and run_wall_s of the
// run, and backend_config_calls: the Config calls the fake counted meanwhile.

/// Median and range of a few samples.
struct spread {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};

spread spread_of(std::vector<double> values) {
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

double num(const json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// The runs of one case, both paths, by round.
struct case_runs {
  std::string name, kind, label;
  std::map<int, json> direct, scg;
};

/// One table row: a label per column and its values.
using row = std::vector<std::string>;

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
      if (i + 1 < r.size()) out += std::string(width[i] - display_width(r[i]) + 2, ' ');
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& r : rows) out += line(r);
  return out;
}

/// Per-round values of `metric` for one path.
std::vector<double> values(const std::map<int, json>& runs, const std::function<double(const json&)>& metric) {
  std::vector<double> out;
  for (const auto& [round, record] : runs) out.push_back(metric(record));
  return out;
}

/// scg/direct of `metric`, paired round by round.
std::vector<double> ratios(const case_runs& c, const std::function<double(const json&)>& metric) {
  std::vector<double> out;
  for (const auto& [round, scg_record] : c.scg) {
    auto direct = c.direct.find(round);
    if (direct == c.direct.end()) continue;
    const double base = metric(direct->second);
    if (base > 0) out.push_back(metric(scg_record) / base);
  }
  return out;
}

/// CPU the rest of the machine spent during a run, in cores: everything busy
/// minus scg, the fake and scg-bench.
double foreign_cores(const json& r) {
  const double wall = num(r, "run_wall_s");
  if (wall <= 0) return 0;
  // process_cpu_s also covers scg-bench's start-up and connecting, client_cpu_s only the load.
  const double client = r.contains("process_cpu_s") ? num(r, "process_cpu_s") : num(r, "client_cpu_s");
  const double ours = num(r, "scg_cpu_s") + num(r, "fake_cpu_s") + client;
  return std::max(0.0, num(r, "box_busy_s") - ours) / wall;
}

int run_report(cli_args& args) {
  const auto raw_path = args.text("raw");
  const auto json_path = args.text("json", "");
  const auto markdown_path = args.text("markdown", "");
  if (!args.finish()) return 2;
  std::ifstream raw(raw_path);
  if (!raw) {
    std::fprintf(stderr, "scg-bench: cannot read %s\n", raw_path.c_str());
    return 1;
  }

  json meta = json::object(), memory = json::object(), sessions = json::object(), idle = json::object();
  std::vector<case_runs> cases;
  std::string text_line;
  for (int line_no = 1; std::getline(raw, text_line); ++line_no) {
    if (text_line.empty()) continue;
    auto record = json::parse(text_line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      std::fprintf(stderr, "scg-bench: %s:%d is not a JSON object\n", raw_path.c_str(), line_no);
      return 1;
    }
    const auto kind = record.value("kind", "");
    record.erase("kind");
    if (kind == "meta") meta = record;
    else if (kind == "memory") memory = record;
    else if (kind == "idle") idle = record;
    else if (kind == "sessions") sessions = record;
    else if (kind == "unary" || kind == "stream") {
      const auto name = record.value("case", kind);
      auto it = std::find_if(cases.begin(), cases.end(), [&](const case_runs& c) { return c.name == name; });
      if (it == cases.end()) {
        case_runs c{name, kind, record.value("label", name), {}, {}};
        cases.push_back(std::move(c));
        it = std::prev(cases.end());
      }
      (record.value("path", "") == "scg" ? it->scg : it->direct)[record.value("round", 0)] = record;
    }
  }

  json report = {{"meta", meta}, {"cases", json::array()}};
  std::vector<row> rows;
  std::vector<json> aims;
  std::optional<double> unary32_ratio, stream_ratio;
  const auto rps = [](const json& r) { return num(r, "rps"); };
  const auto p50 = [](const json& r) { return num(r, "p50_us"); };
  const auto p99 = [](const json& r) { return num(r, "p99_us"); };
  const auto errors = [](const json& r) { return num(r, "errors"); };
  const auto mbps = [](const json& r) { return num(r, "mb_per_s"); };
  const auto cpu_per_100k = [](const json& r) {
    const double calls = num(r, "rpcs_total");
    return calls > 0 ? num(r, "scg_cpu_s") / calls * 1e5 : 0.0;
  };
  const auto cpu_per_gib = [](const json& r) {
    const double gib = num(r, "bytes") / double(1 << 30);
    return gib > 0 ? num(r, "scg_cpu_s") / gib : 0.0;
  };
  // scg + fake + scg-bench: the whole chain's CPU, whose sum bounds throughput on a
  // machine where all three share the CPUs.
  const auto chain_cpu = [](const json& r) {
    const double client = r.contains("process_cpu_s") ? num(r, "process_cpu_s") : num(r, "client_cpu_s");
    return num(r, "scg_cpu_s") + num(r, "fake_cpu_s") + client;
  };
  const auto chain_cpu_per_100k = [&](const json& r) {
    const double calls = num(r, "rpcs_total");
    return calls > 0 ? chain_cpu(r) / calls * 1e5 : 0.0;
  };
  const auto chain_cpu_per_gib = [&](const json& r) {
    const double gib = num(r, "bytes") / double(1 << 30);
    return gib > 0 ? chain_cpu(r) / gib : 0.0;
  };
  const auto client_cpu_share = [](const json& r) {
    const double wall = num(r, "wall_s") > 0 ? num(r, "wall_s") : num(r, "seconds");
    return wall > 0 ? num(r, "client_cpu_s") / wall : 0.0;
  };

  // The backend's own count must match what the client saw answered: a load
  // generator that counted failures as successes would show here.
  std::vector<std::string> warnings;
  for (const auto& c : cases) {
    if (c.kind != "unary") continue;
    for (const auto* side : {&c.direct, &c.scg})
      for (const auto& [round, r] : *side) {
        if (!r.contains("backend_config_calls") || num(r, "backend_config_calls") < 0) continue;  // no count from the fake
        const double answered = num(r, "rpcs_total") - num(r, "errors_total");
        if (num(r, "backend_config_calls") < answered || num(r, "errors_total") > 0)
          warnings.push_back(c.label + " " + r.value("path", "") + " round " + std::to_string(round) + ": " +
                             fixed(num(r, "errors_total"), 0) + " failed calls, backend counted " +
                             fixed(num(r, "backend_config_calls"), 0) + " for " + fixed(answered, 0) + " answered");
      }
  }
  if (num(sessions, "errors") > 0) warnings.push_back(fixed(num(sessions, "errors"), 0) + " session opens failed");
  if (num(meta, "quick") > 0) warnings.push_back("quick mode: a smoke test, too short to judge the aims");
  {
    std::vector<double> foreign;
    for (const auto& c : cases)
      for (const auto* side : {&c.direct, &c.scg})
        for (const auto& [round, r] : *side) foreign.push_back(foreign_cores(r));
    const auto s_foreign = spread_of(foreign);
    if (s_foreign.n && s_foreign.median > 0.3)
      warnings.push_back("other work on the machine took " + fixed(s_foreign.median, 2) +
                         " cores (median over runs): the figures are disturbed");
  }
  report["warnings"] = warnings;

  for (const auto& c : cases) {
    json entry = {{"case", c.name}, {"label", c.label}, {"kind", c.kind}};
    const bool unary = c.kind == "unary";
    for (const auto* side : {&c.direct, &c.scg}) {
      const bool via_scg = side == &c.scg;
      json path = json::object();
      row r = {c.label, via_scg ? "via scg" : "direct"};
      if (unary) {
        auto s_rps = spread_of(values(*side, rps)), s_p50 = spread_of(values(*side, p50)),
             s_p99 = spread_of(values(*side, p99));
        double error_sum = 0;
        for (double e : values(*side, errors)) error_sum += e;
        path = {{"rps", to_json(s_rps, 1)}, {"p50_us", to_json(s_p50, 0)}, {"p99_us", to_json(s_p99, 0)},
                {"errors", error_sum}};
        r.insert(r.end(), {show(s_rps, 0) + " rps", show(s_p50, 0), show(s_p99, 0), fixed(error_sum, 0)});
        if (via_scg) {
          auto s_cpu = spread_of(values(*side, cpu_per_100k));
          path["scg_cpu_s_per_100k_rpcs"] = to_json(s_cpu, 2);
          r.push_back(show(s_cpu, 2) + " s/100k RPCs");
        } else {
          r.push_back("");
        }
      } else {
        auto s_mbps = spread_of(values(*side, mbps));
        path = {{"mb_per_s", to_json(s_mbps, 1)}};
        r.insert(r.end(), {show(s_mbps, 0) + " MB/s", "", "", "0"});
        if (via_scg) {
          auto s_cpu = spread_of(values(*side, cpu_per_gib));
          path["scg_cpu_s_per_gib"] = to_json(s_cpu, 2);
          r.push_back(show(s_cpu, 2) + " s/GiB");
        } else {
          r.push_back("");
        }
      }
      const std::function<double(const json&)> chain = unary ? std::function<double(const json&)>(chain_cpu_per_100k) : chain_cpu_per_gib;
      auto s_chain = spread_of(values(*side, chain));
      path[unary ? "chain_cpu_s_per_100k_rpcs" : "chain_cpu_s_per_gib"] = to_json(s_chain, 2);
      r.push_back(show(s_chain, 2) + (unary ? " s/100k RPCs" : " s/GiB"));
      auto s_client = spread_of(values(*side, client_cpu_share));
      auto s_foreign = spread_of(values(*side, foreign_cores));
      path["client_cpu_cores"] = to_json(s_client, 2);
      path["foreign_cpu_cores"] = to_json(s_foreign, 2);
      r.insert(r.end(), {show(s_client, 2), show(s_foreign, 2)});
      entry[via_scg ? "scg" : "direct"] = path;
      rows.push_back(r);
    }
    row ratio_row = {c.label, "scg/direct"};
    if (unary) {
      auto r_rps = spread_of(ratios(c, rps)), r_p50 = spread_of(ratios(c, p50)), r_p99 = spread_of(ratios(c, p99));
      entry["ratio"] = {{"rps", to_json(r_rps, 3)}, {"p50_us", to_json(r_p50, 3)}, {"p99_us", to_json(r_p99, 3)}};
      ratio_row.insert(ratio_row.end(), {show(r_rps, 2), show(r_p50, 2), show(r_p99, 2), "", "", "", "", ""});
      if (!c.direct.empty() && c.direct.begin()->second.value("concurrency", 0) == 32 && r_rps.n)
        unary32_ratio = r_rps.median;
    } else {
      auto r_mbps = spread_of(ratios(c, mbps));
      entry["ratio"] = {{"mb_per_s", to_json(r_mbps, 3)}};
      ratio_row.insert(ratio_row.end(), {show(r_mbps, 2), "", "", "", "", "", "", ""});
      if (r_mbps.n) stream_ratio = r_mbps.median;
    }
    rows.push_back(ratio_row);
    report["cases"].push_back(entry);
  }

  // Memory and sessions.
  std::optional<double> rss_mib, kib_per_session;
  std::vector<row> memory_rows;
  if (!idle.empty()) {
    report["scg_idle_cores"] = num(idle, "scg_idle_cores");
    memory_rows.push_back({"scg CPU while idle", fixed(num(idle, "scg_idle_cores"), 3) + " cores"});
  }
  if (!memory.empty()) {
    const double max_rss = num(memory, "scg_max_rss_kib"), hwm = num(memory, "scg_hwm_kib");
    rss_mib = std::max(max_rss, hwm) / 1024;
    report["memory"] = {{"scg_max_rss_mib", round_to(max_rss / 1024, 1)}, {"scg_hwm_mib", round_to(hwm / 1024, 1)}};
    memory_rows.push_back({"scg RSS under load (sampled max VmRSS)", fixed(max_rss / 1024, 1) + " MiB"});
    memory_rows.push_back({"scg peak RSS (VmHWM)", fixed(hwm / 1024, 1) + " MiB"});
  }
  if (!sessions.empty()) {
    const double opened = num(sessions, "sessions");
    const double before = num(sessions, "rss_before_kib"), after = num(sessions, "rss_after_kib");
    if (opened > 0) kib_per_session = (after - before) / opened;
    report["sessions"] = {{"opened", opened},
                          {"errors", num(sessions, "errors")},
                          {"seconds", num(sessions, "seconds")},
                          {"rss_before_mib", round_to(before / 1024, 1)},
                          {"rss_after_mib", round_to(after / 1024, 1)},
                          {"kib_per_session", round_to(kib_per_session.value_or(0), 2)}};
    memory_rows.push_back({"idle sessions opened via scg (errors)",
                           fixed(opened, 0) + " (" + fixed(num(sessions, "errors"), 0) + ") in " +
                               fixed(num(sessions, "seconds"), 1) + " s"});
    memory_rows.push_back({"scg RSS before → after", fixed(before / 1024, 1) + " → " + fixed(after / 1024, 1) + " MiB"});
    memory_rows.push_back({"RSS per idle session", fixed(kib_per_session.value_or(0), 2) + " KiB"});
  }

  // The aims.
  std::vector<row> aim_rows;
  auto aim = [&](const std::string& name, std::optional<double> measured, double limit, bool at_least,
                 const std::string& unit, int digits) {
    if (!measured) return;
    const bool met = at_least ? *measured >= limit : *measured <= limit;
    const double margin = at_least ? *measured / limit - 1 : 1 - *measured / limit;  // > 0: headroom
    report["aims"].push_back({{"aim", name}, {"measured", round_to(*measured, 3)}, {"limit", limit},
                              {"met", met}, {"margin", round_to(margin, 3)}});
    aim_rows.push_back({name, fixed(*measured, digits) + unit, (at_least ? "≥ " : "≤ ") + fixed(limit, digits) + unit,
                        met ? "met" : "MISSED",
                        (margin >= 0 ? "+" : "") + fixed(margin * 100, 1) + " %"});
  };
  aim("unary c=32 via scg / direct", unary32_ratio, 0.4, true, "×", 2);
  aim("stream via scg / direct", stream_ratio, 0.65, true, "×", 2);
  aim("scg peak RSS under load", rss_mib, 64, false, " MiB", 1);
  aim("RSS per idle session", kib_per_session, 2, false, " KiB", 2);

  const row header = {"workload", "path", "throughput", "p50 µs", "p99 µs", "errors", "scg CPU",
                      "chain CPU", "client cores", "foreign cores"};
  const row memory_header = {"resources", "value"};
  const row aim_header = {"aim", "measured", "target", "verdict", "margin"};
  std::printf("scg bench %s, %s rounds, medians (min–max)\n\n", meta.value("date", "?").c_str(),
              meta.contains("rounds") ? meta["rounds"].dump().c_str() : "?");
  std::printf("%s\n%s\n%s", text_table(header, rows).c_str(), text_table(memory_header, memory_rows).c_str(),
              text_table(aim_header, aim_rows).c_str());
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
    out << "# scg bench " << meta.value("date", "") << "\n\n";
    for (const auto& [key, value] : meta.items())
      out << "- " << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    out << "\nMedians over rounds (streams: over all samples), (min–max) in brackets; ratios are paired "
           "per round or sample.\n\n"
        << markdown_table(header, rows) << "\n"
        << markdown_table(memory_header, memory_rows) << "\n"
        << markdown_table(aim_header, aim_rows);
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
  if (command == "report") return run_report(args);
  std::fprintf(stderr, "scg-bench: unknown command %s\n%s", command.c_str(), usage);
  return 2;
}

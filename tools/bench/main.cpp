// scg-bench, the load generator and report behind scripts/bench.sh: its
// command line (the usage and the flag parser) and the dispatch to the load
// generators (load.cpp) and the report (report.cpp).
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
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "tools/bench/command.hpp"
#include "tools/bench/load.hpp"
#include "tools/bench/report.hpp"

namespace scg::bench {
namespace {

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

}  // namespace

// ------------------------------------------------------------------ arguments

cli_args cli_args::parse(int argc, char** argv, int first) {
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

void cli_args::fail(const std::string& message) {
  if (error.empty()) error = message;
}

std::string cli_args::text(const std::string& name, std::optional<std::string> fallback) {
  read.insert(name);
  auto it = values.find(name);
  if (it != values.end()) return it->second;
  if (!fallback) fail("--" + name + " is required");
  return fallback.value_or("");
}

int64_t cli_args::number(const std::string& name, std::optional<int64_t> fallback, int64_t min) {
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

bool cli_args::finish() {
  for (const auto& [name, value] : values)
    if (!read.count(name)) fail("unknown flag --" + name);
  if (error.empty()) return true;
  std::fprintf(stderr, "scg-bench: %s\n%s", error.c_str(), usage);
  return false;
}

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

// scg-fake-spark: a Spark Connect server emulator for scg's integration tests,
// benchmarks and demo. See README.md next to this file.

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "core/address.hpp"
#include "tools/fake_spark/fake_server.hpp"
#include "tools/fake_spark/ui_api.hpp"

namespace scg::fake {
namespace {

constexpr const char* usage =
    "usage: scg-fake-spark --listen HOST:PORT --name NAME [--ui-listen HOST:PORT]\n"
    "         [--port-file FILE] [--stream-max-responses N] [--responses N]\n"
    "         [--payload-bytes N] [--delay-ms N] [--max-message-bytes N] [--token TOKEN]\n"
    "         [--config-echo KEY=VALUE] [--session-timeout-ms N] [--detached-timeout-ms N]\n"
    "PORT 0 picks a free port; --port-file receives {\"grpc\": PORT, \"ui\": PORT}.\n";

std::optional<int64_t> parse_count(const std::string& text) {
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used != text.size() || value < 0) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// Reads `--flag value` and `--flag=value`; nullopt (after a message) on any mistake.
std::optional<options> parse_args(int argc, char** argv) {
  options opts;
  const std::map<std::string, std::string*> text_flags = {{"--listen", &opts.listen},
                                                          {"--name", &opts.name},
                                                          {"--ui-listen", &opts.ui_listen},
                                                          {"--port-file", &opts.port_file},
                                                          {"--token", &opts.token},
                                                          {"--config-echo", &opts.config_echo}};
  const std::map<std::string, int64_t*> count_flags = {
      {"--stream-max-responses", &opts.stream_max_responses},
      {"--responses", &opts.responses},
      {"--payload-bytes", &opts.payload_bytes},
      {"--rows-per-batch", &opts.rows_per_batch},
      {"--metrics", &opts.metrics},
      {"--delay-ms", &opts.delay_ms},
      {"--max-message-bytes", &opts.max_message_bytes},
      {"--session-timeout-ms", &opts.session_timeout_ms},
      {"--detached-timeout-ms", &opts.detached_timeout_ms}};
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "scg-fake-spark: %s needs a value\n%s", flag.c_str(), usage);
      return std::nullopt;
    }
    if (auto text = text_flags.find(flag); text != text_flags.end()) {
      *text->second = value;
    } else if (auto count = count_flags.find(flag); count != count_flags.end()) {
      auto parsed = parse_count(value);
      if (!parsed) {
        std::fprintf(stderr, "scg-fake-spark: %s wants a non-negative integer, got '%s'\n",
                     flag.c_str(), value.c_str());
        return std::nullopt;
      }
      *count->second = *parsed;
    } else {
      std::fprintf(stderr, "scg-fake-spark: unknown flag %s\n%s", flag.c_str(), usage);
      return std::nullopt;
    }
  }
  if (opts.name.empty()) {
    std::fprintf(stderr, "scg-fake-spark: --name is required\n%s", usage);
    return std::nullopt;
  }
  return opts;
}

/// Writes FILE.tmp and renames it, so a test polling FILE never reads half a file.
bool write_port_file(const std::string& path, int grpc_port, int ui_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"grpc\": " << grpc_port << ", \"ui\": " << ui_port << "}\n";
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int run(const options& opts) {
  // Block the stop signals before gRPC and httplib start threads (they inherit the
  // mask), so that only sigwait below sees them and shutdown runs on this thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // PORT 0 picks a free port.
  std::optional<core::host_port> ui_address;
  if (!opts.ui_listen.empty()) {
    ui_address = core::parse_host_port(opts.ui_listen, true);
    if (!ui_address) {
      std::fprintf(stderr, "scg-fake-spark: bad --ui-listen '%s'\n", opts.ui_listen.c_str());
      return 2;
    }
  }
  const auto grpc_address = core::parse_host_port(opts.listen, true);
  if (!grpc_address) {
    std::fprintf(stderr, "scg-fake-spark: bad --listen '%s'\n", opts.listen.c_str());
    return 2;
  }

  fake_server server(opts);
  const int grpc_port = server.start();
  if (grpc_port == 0) {
    std::fprintf(stderr, "scg-fake-spark: cannot listen on %s\n", opts.listen.c_str());
    return 1;
  }
  ui_api ui(opts.name, [&server] { return server.stats(); });
  int ui_port = 0;
  if (ui_address) {
    ui_port = ui.start(ui_address->host, ui_address->port);
    if (ui_port == 0) {
      std::fprintf(stderr, "scg-fake-spark: cannot listen on %s\n", opts.ui_listen.c_str());
      return 1;
    }
  }
  if (!opts.port_file.empty() && !write_port_file(opts.port_file, grpc_port, ui_port)) {
    std::fprintf(stderr, "scg-fake-spark: cannot write %s\n", opts.port_file.c_str());
    return 1;
  }
  const std::string ui_text =
      ui_address ? core::host_port{ui_address->host, static_cast<std::uint16_t>(ui_port)}.str() : "off";
  const std::string grpc_text = core::host_port{grpc_address->host, static_cast<std::uint16_t>(grpc_port)}.str();
  std::fprintf(stderr, "scg-fake-spark %s listening grpc=%s ui=%s\n", opts.name.c_str(), grpc_text.c_str(),
               ui_text.c_str());
  std::fflush(stderr);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  ui.stop();
  server.shutdown(std::chrono::milliseconds(500));
  std::fprintf(stderr, "scg-fake-spark %s stopped (signal %d)\n", opts.name.c_str(), signal);
  return 0;
}

}  // namespace
}  // namespace scg::fake

int main(int argc, char** argv) {
  auto opts = scg::fake::parse_args(argc, argv);
  if (!opts) return 2;
  return scg::fake::run(*opts);
}

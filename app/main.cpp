// scg: a gateway replica for Apache Spark Connect.
//   scg --config FILE          run a replica
//   scg --check-config FILE    validate FILE; non-zero exit naming the bad field
//   scg --version
//   scg drain [--wait] [--timeout SECS] [--admin URL] [--token-file FILE] [--undrain] BACKEND
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "app/drain_cli.hpp"
#include "app/gateway.hpp"
#include "config/config.hpp"

// Read by jemalloc (linked into scg when available) at start-up. One arena:
// buffers freed on one thread are reused by the next instead of sitting in
// another thread's arena. Freed pages are purged after 250 ms, by the threads
// that allocate rather than by a background thread, which fell behind on a
// busy machine. (Chosen under the earlier gRPC data plane, where one arena
// took the peak RSS of a 1 GiB stream from about 75 to 49 MiB and 250 ms of
// decay the unary peak from 70-84 to 58-65 MiB; the nghttp2 data plane holds
// its bytes in chunks of its own, net/h2/bytes.hpp, and keeps the setting.) The price: after a burst, an idle
// scg keeps those pages until it allocates again: the gateway's 1 s loop
// therefore asks for the decay (core::allocator().release_freed).
extern "C" {
const char* malloc_conf = "narenas:1,dirty_decay_ms:250,muzzy_decay_ms:0,background_thread:false";
}

#ifdef SCG_JEMALLOC
#include <jemalloc/jemalloc.h>

#include "core/allocator.hpp"

namespace {

std::uint64_t jemalloc_allocated() {
  std::uint64_t epoch = 1;  // statistics are cached until the epoch advances
  std::size_t size = sizeof epoch;
  mallctl("epoch", &epoch, &size, &epoch, size);
  std::size_t allocated = 0;
  size = sizeof allocated;
  return mallctl("stats.allocated", &allocated, &size, nullptr, 0) == 0 ? allocated : 0;
}

void jemalloc_release_freed() {
  // "arena.<MALLCTL_ARENAS_ALL>.decay": purge what the decay curve allows, in every arena.
  static_assert(MALLCTL_ARENAS_ALL == 4096, "the name below spells it");
  mallctl("arena.4096.decay", nullptr, nullptr, nullptr, 0);
}

}  // namespace
#endif

namespace {

int usage(const char* msg) {
  if (msg) std::cerr << "scg: " << msg << "\n";
  std::cerr << "usage: scg --config FILE [--port-file FILE]\n"
               "       scg --check-config FILE\n"
               "       scg --version\n"
            << scg::app::drain_usage;
  return 2;
}

/// What `scg` prints for a configuration it cannot use: one line naming the field.
int invalid_config(const std::string& path, const scg::config::error& err) {
  std::cerr << "scg: invalid config " << path << ": " << err.to_string() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "drain") == 0) {
    auto parsed = scg::app::parse_drain_args({argv + 2, argv + argc});
    if (auto* why = std::get_if<std::string>(&parsed)) return usage(("drain: " + *why).c_str());
    return scg::app::run_drain(std::get<scg::app::drain_args>(parsed), std::cout, std::cerr);
  }
  std::string config_path, check_path, port_file;
  // Hidden, test-only flags (in no usage text): config::cluster's test_* fields.
  int test_flush_delay_ms = -1, test_cluster_protocol = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    auto number = [&](int& out, long low, long high) {
      std::string text;
      if (!value(text)) return false;
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || n < low || n > high) return false;
      out = static_cast<int>(n);
      return true;
    };
    if (arg == "--version") {
      std::cout << "scg " << SCG_VERSION << "\n";
      return 0;
    } else if (arg == "--config") {
      if (!value(config_path)) return usage("--config needs a FILE");
    } else if (arg == "--check-config") {
      if (!value(check_path)) return usage("--check-config needs a FILE");
    } else if (arg == "--port-file") {
      if (!value(port_file)) return usage("--port-file needs a FILE");
    } else if (arg == "--test-flush-delay-ms") {
      if (!number(test_flush_delay_ms, 0, 600'000)) return usage("--test-flush-delay-ms needs 0 to 600000");
    } else if (arg == "--test-cluster-protocol") {
      if (!number(test_cluster_protocol, 1, 999)) return usage("--test-cluster-protocol needs 1 to 999");
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  const std::string& path = check_path.empty() ? config_path : check_path;
  if (path.empty()) return usage("--config FILE is required");

  const auto loaded = scg::config::load(path);
  if (!loaded.ok()) return invalid_config(path, loaded.error());
  const scg::config::gateway& cfg = loaded.value();
  if (!check_path.empty()) {
    // Keys and secrets are read at start: read them now too, so a missing
    // file or variable shows here rather than when the replica starts.
    if (const auto secrets = scg::app::read_secrets(cfg); !secrets.ok()) return invalid_config(path, secrets.error());
    std::cout << "scg: " << path << " is valid\n";
    return 0;
  }

  // Block the stop signals in every thread; the gateway waits for them.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

#ifdef SCG_JEMALLOC
  scg::core::allocator() = {jemalloc_allocated, jemalloc_release_freed};
#endif
  scg::app::setup_logging(cfg.logging);
  auto run_cfg = cfg;  // the hidden flags ride in the cluster section to the cluster actor
  if (run_cfg.cluster) {
    run_cfg.cluster->test_flush_delay_ms = test_flush_delay_ms;
    run_cfg.cluster->test_cluster_protocol = test_cluster_protocol;
  }
  return scg::app::run_gateway(run_cfg, config_path, port_file);
}

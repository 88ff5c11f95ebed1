// The scg binary's command line: --version and --check-config.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "tests/integration/harness.hpp"

using namespace scg::test;

namespace {

/// Runs scg with `args`; {exit code, combined output}.
std::pair<int, std::string> run_scg(const temp_dir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{bin("scg")};
  argv.insert(argv.end(), args.begin(), args.end());
  auto log = dir.file("cli.out");
  std::remove(log.c_str());
  process p{argv, log};
  auto code = p.wait(10s);
  return {code.value_or(-999), read_file(log)};
}

}  // namespace

TEST_CASE("scg --version prints the version", "[integration][cli]") {
  temp_dir dir;
  auto [code, out] = run_scg(dir, {"--version"});
  CHECK(code == 0);
  CHECK(out.rfind("scg ", 0) == 0);
}

TEST_CASE("scg --check-config accepts a valid file and names the bad field of others",
          "[integration][cli]") {
  temp_dir dir;
  auto valid = dir.write("ok.yaml", "backends: [\"127.0.0.1:15002\"]\n");
  auto [ok_code, ok_out] = run_scg(dir, {"--check-config", valid});
  CHECK(ok_code == 0);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"backends: [\"no-port\"]\n", "backends[0]"},
      {"bind_addr: \"1.2.3.4:99999\"\nbackends: [\"a:1\"]\n", "bind_addr"},
      {"backends: [\"a:1\"]\nplacement: { strategy: fastest }\n", "placement.strategy"},
      {"bind_addr: \"0.0.0.0:15003\"\n", "backends"},
      {"backends: [\"a:1\"]\nshutdown: { deadline_secs: soon }\n", "shutdown.deadline_secs"},
      {"backends: { a: 1 }\n", "backends"},
      {"backends: [\"a:1\"]\nbogus: 1\n", "bogus"},
  };
  for (const auto& [yaml, field] : cases) {
    auto file = dir.write("bad.yaml", yaml);
    auto [code, out] = run_scg(dir, {"--check-config", file});
    INFO(yaml << " -> " << out);
    CHECK(code != 0);
    CHECK(out.find(field) != std::string::npos);
  }
  auto [missing_code, missing_out] = run_scg(dir, {"--check-config", dir.file("absent.yaml")});
  CHECK(missing_code != 0);
  CHECK(missing_out.find("absent.yaml") != std::string::npos);
}

TEST_CASE("scg refuses to start when its replay spool cannot be made, naming the key", "[integration][cli]") {
  temp_dir dir;
  dir.write("not-a-dir", "a file where the spool's parent should be");
  const auto cfg = dir.write("spool.yaml", "bind_addr: 127.0.0.1:0\nadmin_addr: 127.0.0.1:0\n"
                                           "backends: [{ name: b, address: 127.0.0.1:1 }]\n"
                                           "on_backend_lost: { action: replay, spool_dir: " +
                                               dir.file("not-a-dir") + " }\n");
  auto [code, out] = run_scg(dir, {"--config", cfg});
  INFO(out);
  CHECK(code == 1);
  CHECK(out.find("startup_failed") != std::string::npos);
  CHECK(out.find("on_backend_lost.spool_dir") != std::string::npos);
  CHECK(out.find(dir.file("not-a-dir")) != std::string::npos);
}

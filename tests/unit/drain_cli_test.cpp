#include "app/drain_cli.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace scg::app;

namespace {

std::string error_of(const std::vector<std::string>& args) {
  auto r = parse_drain_args(args);
  REQUIRE(std::holds_alternative<std::string>(r));
  return std::get<std::string>(r);
}

}  // namespace

TEST_CASE("scg drain reads its options and defaults to the local admin port", "[drain][cli]") {
  auto r = parse_drain_args({"sc-1"});
  REQUIRE(std::holds_alternative<drain_args>(r));
  auto a = std::get<drain_args>(r);
  CHECK(a.backend == "sc-1");
  CHECK(a.admin == "http://127.0.0.1:9090");
  CHECK_FALSE(a.wait);
  auto w = std::get<drain_args>(parse_drain_args({"--wait", "--timeout", "90", "--admin", "http://localhost:9191", "sc-2"}));
  CHECK(w.wait);
  CHECK(w.timeout_secs == 90);
  CHECK(w.admin == "http://localhost:9191");
  CHECK(w.backend == "sc-2");
  CHECK(std::get<drain_args>(parse_drain_args({"--undrain", "sc-1"})).undrain);
}

TEST_CASE("scg drain names what is wrong with its arguments", "[drain][cli]") {
  CHECK(error_of({}).find("BACKEND is required") != std::string::npos);
  CHECK(error_of({"--timeout"}).find("--timeout needs SECS") != std::string::npos);
  CHECK(error_of({"--timeout", "0", "a"}).find("positive number") != std::string::npos);
  CHECK(error_of({"--timeout", "soon", "a"}).find("\"soon\"") != std::string::npos);
  CHECK(error_of({"--admin"}).find("--admin needs a URL") != std::string::npos);
  CHECK(error_of({"--admin", "127.0.0.1:9090", "a"}).find("http://HOST:PORT") != std::string::npos);
  CHECK(error_of({"--admin", "https://h:1", "a"}).find("http://HOST:PORT") != std::string::npos);
  CHECK(error_of({"--bogus", "a"}) == "unknown option --bogus");
  CHECK(error_of({"a", "b"}).find("one BACKEND only") != std::string::npos);
  CHECK(error_of({"--wait", "--undrain", "a"}).find("not with --undrain") != std::string::npos);
}

TEST_CASE("scg drain says so when the admin API cannot be reached", "[drain][cli]") {
  drain_args a;
  a.backend = "sc-1";
  a.admin = "http://127.0.0.1:1";  // nothing listens on port 1
  std::ostringstream out, err;
  CHECK(run_drain(a, out, err) == 3);
  CHECK(err.str().find("cannot reach the admin API at http://127.0.0.1:1") != std::string::npos);
}

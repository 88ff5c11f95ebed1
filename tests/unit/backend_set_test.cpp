#include <catch2/catch.hpp>

#include <map>

#include "actors/backend_set.hpp"

using namespace scg::actors;
using kind = backend_change::kind;

namespace {

scg::config::backend entry(std::string name, std::string address, bool all = false, std::string ui = "") {
  scg::config::backend b;
  b.name = std::move(name);
  b.address = std::move(address);
  b.ui_url = std::move(ui);
  b.resolve_all = all;
  return b;
}

/// A resolver that answers from a map, like a DNS server the test controls.
host_resolver dns(std::map<std::string, std::vector<std::string>> names) {
  return [names](const std::string& host) {
    auto it = names.find(host);
    return it == names.end() ? std::vector<std::string>{} : it->second;
  };
}

std::vector<running_backend> running_from(const wanted_backends& w) {
  std::vector<running_backend> out;
  for (const auto& s : w.specs) out.push_back({s, false});
  return out;
}

}  // namespace

TEST_CASE("a resolve: all entry is one backend per address, with the address in its name and UI url",
          "[backend_set]") {
  auto w = expand({entry("pool", "spark.svc:15002", true, "http://{host}:4040"), entry("solo", "solo:15002")},
                  dns({{"spark.svc", {"10.0.0.2", "10.0.0.1", "10.0.0.2", "fd00::5"}}}));
  REQUIRE(w.specs.size() == 4);
  CHECK(w.specs[0] == backend_spec{"pool@10.0.0.1:15002", "10.0.0.1:15002", "http://10.0.0.1:4040"});
  CHECK(w.specs[1] == backend_spec{"pool@10.0.0.2:15002", "10.0.0.2:15002", "http://10.0.0.2:4040"});
  CHECK(w.specs[2] == backend_spec{"pool@[fd00::5]:15002", "[fd00::5]:15002", "http://[fd00::5]:4040"});
  CHECK(w.specs[3] == backend_spec{"solo", "solo:15002", ""});
  CHECK(w.unresolved.empty());
}

TEST_CASE("the first plan adds every backend - the same set again changes nothing", "[backend_set]") {
  auto w = expand({entry("a", "a:1"), entry("b", "b:1")}, dns({}));
  auto first = plan_changes({}, w);
  REQUIRE(first.size() == 2);
  CHECK(first[0].what == kind::add);
  CHECK(first[1].what == kind::add);
  CHECK(plan_changes(running_from(w), w).empty());
}

TEST_CASE("a reload removes names no longer listed, adds new ones and restores returning ones",
          "[backend_set]") {
  auto before = expand({entry("a", "a:1"), entry("b", "b:1")}, dns({}));
  auto running = running_from(before);
  auto changes = plan_changes(running, expand({entry("b", "b:1"), entry("c", "c:1")}, dns({})));
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].what == kind::add);
  CHECK(changes[0].spec.name == "c");
  CHECK(changes[1].what == kind::remove);
  CHECK(changes[1].index == 0);

  running[0].removed = true;
  running.push_back({{"c", "c:1", ""}, false});
  changes = plan_changes(running, expand({entry("a", "a:1"), entry("b", "b:1"), entry("c", "c:1")}, dns({})));
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].what == kind::restore);
  CHECK(changes[0].index == 0);
}

TEST_CASE("a name whose address changed is removed and added anew", "[backend_set]") {
  auto running = running_from(expand({entry("a", "a:1")}, dns({})));
  auto changes = plan_changes(running, expand({entry("a", "a-new:1")}, dns({})));
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].what == kind::remove);
  CHECK(changes[0].index == 0);
  CHECK(changes[1].what == kind::add);
  CHECK(changes[1].spec.address == "a-new:1");
  // Later, the newest entry of the name counts: the same set plans nothing.
  running[0].removed = true;
  running.push_back({changes[1].spec, false});
  CHECK(plan_changes(running, expand({entry("a", "a-new:1")}, dns({}))).empty());
}

TEST_CASE("re-resolving follows the addresses - a name that does not resolve keeps its backends",
          "[backend_set]") {
  const std::vector<scg::config::backend> entries{entry("pool", "spark.svc:15002", true)};
  auto running = running_from(expand(entries, dns({{"spark.svc", {"10.0.0.1", "10.0.0.2"}}})));

  auto scaled = plan_changes(running, expand(entries, dns({{"spark.svc", {"10.0.0.2", "10.0.0.3"}}})));
  REQUIRE(scaled.size() == 2);
  CHECK(scaled[0].what == kind::add);
  CHECK(scaled[0].spec.name == "pool@10.0.0.3:15002");
  CHECK(scaled[1].what == kind::remove);
  CHECK(scaled[1].spec.name == "pool@10.0.0.1:15002");

  auto outage = expand(entries, dns({}));
  CHECK(outage.unresolved == std::vector<std::string>{"pool"});
  CHECK(plan_changes(running, outage).empty());
}

TEST_CASE("localhost resolves through the system resolver", "[backend_set]") {
  auto ips = resolve_host("localhost");
  REQUIRE_FALSE(ips.empty());
  CHECK(std::find(ips.begin(), ips.end(), "127.0.0.1") != ips.end());
  CHECK(resolve_host("no-such-host.invalid").empty());
}

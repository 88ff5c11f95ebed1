// cluster/refresh_sweep.hpp: what the refresh pass does with each entry.
#include <catch2/catch.hpp>

#include <string>

#include "cluster/refresh_sweep.hpp"
#include "core/replicated_key.hpp"

using namespace scg::cluster;
using scg::core::key_kind;
using scg::core::make_key;

namespace {

constexpr std::int64_t ttl = 60'000;
const binding_ttls ttls{ttl, ttl / 2};
constexpr std::int64_t wall = 10'000'000;  // wall ms now
constexpr std::int64_t steady = 500'000;   // steady ms now

entry_view live(const std::string& key, std::int64_t written) {
  return {key, "spark-a", "", "scg-0", {static_cast<std::uint64_t>(written), 0}, false, 0, 0};
}

}  // namespace

TEST_CASE("a binding in use here is touched once its version is a quarter ttl old", "[cluster][refresh]") {
  scg::actors::session_table used(1);
  const auto key = make_key(key_kind::session, "t\x1fu\x1fs1");
  used.set_session(key.substr(2), 0, steady - 1000);  // used a second ago
  refresh_batch out;
  judge_for_refresh(live(key, wall - ttl / 2), ttls, used, wall, steady, out);
  REQUIRE(out.touch.size() == 1);
  CHECK(out.touch[0].key == key);
  CHECK(out.touch[0].backend == "spark-a");
  CHECK(out.expire.empty());
  // A fresh version needs no touch whatever the use.
  refresh_batch fresh;
  judge_for_refresh(live(key, wall - ttl / 8), ttls, used, wall, steady, fresh);
  CHECK(fresh.touch.empty());
}

TEST_CASE("a binding nobody used for a ttl expires, and one only learned from a peer is no use",
          "[cluster][refresh]") {
  scg::actors::session_table used(1);
  const auto session = make_key(key_kind::session, "s2");
  used.set_session("s2", 0, 0);  // mirrored from a peer: last seen 0
  const auto op = make_key(key_kind::operation, "op-1");
  refresh_batch out;
  judge_for_refresh(live(session, wall - 2 * ttl), ttls, used, wall, steady, out);
  judge_for_refresh(live(op, wall - ttl), ttls, used, wall, steady, out);  // the op ttl is half
  judge_for_refresh(live(op, wall - ttl / 2), ttls, used, wall, steady, out);  // not yet
  CHECK(out.expire == std::vector<std::string>{session, op});
  CHECK(out.touch.empty());
}

TEST_CASE("tombstones past their expiry are dropped and backend state never expires", "[cluster][refresh]") {
  scg::actors::session_table used(1);
  refresh_batch out;
  const auto gone = make_key(key_kind::session, "s3"), kept = make_key(key_kind::session, "s4");
  judge_for_refresh({gone, "", "", "scg-0", {1, 0}, true, static_cast<std::uint64_t>(wall - 1), 0}, ttls, used, wall,
                    steady, out);
  judge_for_refresh({kept, "", "", "scg-0", {1, 0}, true, static_cast<std::uint64_t>(wall + 1), 0}, ttls, used, wall,
                    steady, out);
  judge_for_refresh(live(make_key(key_kind::drain, "spark-a"), 1), ttls, used, wall, steady, out);
  judge_for_refresh(live(make_key(key_kind::health, "spark-a"), 1), ttls, used, wall, steady, out);
  CHECK(out.forget == std::vector<std::string>{gone});
  CHECK(out.expire.empty());
  CHECK(out.touch.empty());
}

TEST_CASE("a refresh pass comes every sixteenth of the shorter ttl, from a round to a minute",
          "[cluster][refresh]") {
  CHECK(refresh_period_ms({3'600'000, 600'000}, 2000) == 37'500);
  CHECK(refresh_period_ms({3'600'000, 3'600'000}, 2000) == 60'000);
  CHECK(refresh_period_ms({16'000, 600'000}, 2000) == 2000);
}

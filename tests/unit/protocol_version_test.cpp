// cluster/protocol_version.hpp: which peers a replica can speak with.
#include <catch2/catch.hpp>

#include "cluster/protocol_version.hpp"

using namespace scg::cluster;

TEST_CASE("this build speaks protocol 4 and still speaks v0.1.0's protocol 1", "[cluster][version]") {
  const auto self = this_build();
  CHECK(self.protocol == 4);
  CHECK(self.min_protocol == 1);
  CHECK(self.scg_version == SCG_VERSION);
  CHECK(common_protocol(self, legacy_peer()) == 1);  // a v0.1.0 peer
  CHECK(common_protocol(self, self) == 4);
  CHECK(sends_legacy_hello(self));
}

TEST_CASE("each message shape goes to the peers whose common protocol has it", "[cluster][version]") {
  CHECK_FALSE(announces_synced(legacy_peer()));
  CHECK(announces_synced(peer_version{2, 1, "x"}));
  CHECK_FALSE(exchanges_fine_digest(2));
  CHECK(exchanges_fine_digest(3));
  CHECK_FALSE(sends_packed_repairs(3));  // a protocol-3 peer gets the vector of entries
  CHECK(sends_packed_repairs(4));
}

TEST_CASE("two replicas speak the newest protocol in both ranges, none when the ranges do not meet",
          "[cluster][version]") {
  const peer_version two{2, 1, "0.2.0"}, three{3, 2, "0.3.0"}, four{4, 3, "0.4.0"};
  CHECK(common_protocol(two, three) == 2);
  CHECK(common_protocol(three, two) == 2);
  CHECK(common_protocol(three, four) == 3);
  CHECK(common_protocol(two, four) == 0);  // two releases apart: refused, both ways
  CHECK(common_protocol(four, two) == 0);
  CHECK(common_protocol(three, legacy_peer()) == 0);
  CHECK_FALSE(sends_legacy_hello(three));  // v0.1.0 never sees a hello it would accept
  CHECK(common_protocol(two, peer_version{9, 9, "x"}) == 0);
  CHECK(common_protocol(two, peer_version{1, 2, "broken"}) == 0);  // an empty range
}

TEST_CASE("a replica announces this build, or one protocol alone when a test asks", "[cluster][version]") {
  CHECK(announced_version(0) == this_build());
  const auto three = announced_version(3);  // --test-cluster-protocol 3: a build before `lookup`
  CHECK(three.protocol == 3);
  CHECK(three.min_protocol == 3);
  CHECK(three.scg_version == SCG_VERSION);
  CHECK_FALSE(sends_legacy_hello(three));
  CHECK(common_protocol(announced_version(9), this_build()) == 0);  // refused both ways
  CHECK(sends_legacy_hello(announced_version(1)));
  CHECK(announced_version(1000) == this_build());  // out of range: ignored
}

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/rendezvous.hpp"

using scg::core::owner_of;
using scg::core::stable_hash;
using scg::core::stable_hasher;

TEST_CASE("stable hashes do not change between builds or machines", "[rendezvous]") {
  // Pinned values: if these move, replicas running different builds would
  // disagree on owners and digests.
  CHECK(stable_hash("") == 0xa2d07f595e48e313ull);
  CHECK(stable_hash("s/abc") == 0xa063ad59a7cb1a60ull);
  CHECK(stable_hasher{}.add("ab").add("c").finish() != stable_hasher{}.add("a").add("bc").finish());
}

TEST_CASE("the owner of a key does not depend on the order of members", "[rendezvous]") {
  std::vector<std::string> m1{"a", "b", "c"};
  std::vector<std::string> m2{"c", "a", "b"};
  for (int i = 0; i < 200; ++i) {
    std::string key = "s/" + std::to_string(i);
    std::string owner = owner_of(key, m1);
    CHECK(owner == owner_of(key, m2));
    CHECK(owner == owner_of(key, m1));
  }
}

TEST_CASE("no members means no owner", "[rendezvous]") {
  CHECK(owner_of("s/x", {}).empty());
  CHECK(owner_of("s/x", {"only"}) == "only");
}

TEST_CASE("removing a member moves only the keys it owned", "[rendezvous]") {
  const std::vector<std::string> all{"r0", "r1", "r2", "r3"};
  for (int i = 0; i < 1000; ++i) {
    std::string key = "o/" + std::to_string(i);
    std::string owner = owner_of(key, all);
    for (const auto& gone : all) {
      std::vector<std::string> rest;
      for (const auto& m : all)
        if (m != gone) rest.push_back(m);
      std::string after = owner_of(key, rest);
      if (gone == owner)
        CHECK(after != owner);
      else
        CHECK(after == owner);
    }
  }
}

TEST_CASE("keys spread evenly over three members", "[rendezvous]") {
  const std::vector<std::string> members{"scg-0", "scg-1", "scg-2"};
  const int keys = 30000;
  std::map<std::string, int> count;
  for (int i = 0; i < keys; ++i) ++count[owner_of("s/" + std::to_string(i), members)];
  REQUIRE(count.size() == 3);
  for (const auto& [member, n] : count) {
    INFO(member << " owns " << n);
    CHECK(n > keys * 25 / 100);
    CHECK(n < keys * 42 / 100);
  }
}

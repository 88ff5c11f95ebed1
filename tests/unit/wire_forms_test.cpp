// cluster/wire_forms.hpp: entries and digests in the forms the cluster wire takes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cluster/wire_forms.hpp"

using namespace scg::cluster;

namespace {

std::vector<entry> entries(std::size_t n) {
  std::vector<entry> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back({"s/" + std::to_string(i), "spark-a", {}, {{i + 1, 0}, "n"}});
  return out;
}

}  // namespace

TEST_CASE("a batch goes in messages of a chunk at most, in order, and at least one", "[cluster][wire]") {
  CHECK(in_parts({}, 4).size() == 1);  // SIGTERM's hand-off sends one, empty
  CHECK(in_parts({}, 4)[0].empty());
  CHECK(in_parts(entries(4), 4).size() == 1);
  const auto parts = in_parts(entries(10), 4);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].size() == 4);
  CHECK(parts[1].size() == 4);
  CHECK(parts[2].size() == 2);
  CHECK(parts[0][0].key == "s/0");
  CHECK(parts[1][0].key == "s/4");
  CHECK(parts[2][1].key == "s/9");
  CHECK(in_parts(entries(8), 4).size() == 2);
}

TEST_CASE("a digest travels as its hashes and is read back as every release read it", "[cluster][wire]") {
  bucket_digest d{};
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = i * 7 + 1;
  const auto wire = to_wire(d);
  CHECK(wire.size() == digest_buckets);
  CHECK(bucket_digest_from(wire) == d);
  // Short: the missing hashes read as 0; long: the rest is ignored.
  auto back = bucket_digest_from({5, 6});
  CHECK(back[0] == 5);
  CHECK(back[1] == 6);
  CHECK(back[2] == 0);
  auto long_wire = wire;
  long_wire.push_back(99);
  CHECK(bucket_digest_from(long_wire) == d);
}

TEST_CASE("a fine digest is taken only whole", "[cluster][wire]") {
  fine_digest f{};
  f[0] = 1;
  f[fine_buckets - 1] = 2;
  const auto wire = to_wire(f);
  REQUIRE(fine_digest_from(wire).has_value());
  CHECK(*fine_digest_from(wire) == f);
  CHECK_FALSE(fine_digest_from({1, 2, 3}).has_value());
  CHECK_FALSE(fine_digest_from(std::vector<std::uint64_t>(fine_buckets + 1)).has_value());
}

TEST_CASE("the buckets that differ are repaired whole", "[cluster][wire]") {
  bucket_digest a{}, b{};
  b[3] = 1;
  b[60] = 2;
  const auto parts = differing_whole_buckets(a, b);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].bucket == 3);
  CHECK(parts[0].subs == ~std::uint64_t{0});
  CHECK(parts[1].bucket == 60);
  CHECK(differing_whole_buckets(a, a).empty());
}

TEST_CASE("a packed message reads back as the vector an older peer takes", "[cluster][wire]") {
  packed_entries p;
  for (const auto& e : entries(3)) p.add(e);
  const auto back = unpacked(p);
  REQUIRE(back.size() == 3);
  CHECK(back[2].key == "s/2");
  CHECK(back[2].backend == "spark-a");
  CHECK(back[2].ver.time.wall_ms == 3);
  CHECK(unpacked(packed_entries{}).empty());
}

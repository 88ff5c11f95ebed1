// The cluster protocol's entry on the wire: what a replica sends is what the
// previous version sent, field for field, so both can run side by side.
#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "cluster/messages.hpp"

using namespace scg::cluster;

namespace {

std::vector<char> bytes_of(entry e) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(e));
  return buf;
}

/// The fields in the order replicas before operation starts wrote them.
std::vector<char> previous_bytes(entry e, std::uint64_t last) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(e.key, e.backend, e.session, e.ver, e.deleted, last));
  return buf;
}

entry read_back(const std::vector<char>& buf) {
  entry out;
  caf::binary_deserializer source{nullptr, buf};
  REQUIRE_FALSE(source(out));
  return out;
}

}  // namespace

TEST_CASE("an operation's start travels in the field a tombstone's expiry uses", "[cluster][wire]") {
  entry op{"o/op-1", "spark-a", "t\x1fu\x1fs", {{1700000000123, 2}, "scg-0"}, false, 0, 1700000000000};
  CHECK(bytes_of(op) == previous_bytes(op, 1700000000000));
  auto back = read_back(bytes_of(op));
  CHECK(back.started_ms == 1700000000000);
  CHECK(back.tombstone_expires_ms == 0);
  CHECK(back.key == op.key);
  CHECK(back.session == op.session);
  CHECK(back.ver == op.ver);

  entry gone{"o/op-1", {}, {}, {{1700000000200, 0}, "scg-1"}, true, 1700000090000, 0};
  CHECK(bytes_of(gone) == previous_bytes(gone, 1700000090000));
  back = read_back(bytes_of(gone));
  CHECK(back.deleted);
  CHECK(back.tombstone_expires_ms == 1700000090000);
  CHECK(back.started_ms == 0);

  // What a previous replica sends for a live entry (always 0) reads as "start unknown".
  back = read_back(previous_bytes(entry{"s/x", "spark-b", {}, {{5, 0}, "old"}, false, 0, 0}, 0));
  CHECK(back.started_ms == 0);
  CHECK(back.backend == "spark-b");
}

// cluster/packed_entries.hpp: protocol 4's repair entries, packed in one string.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "cluster/packed_entries.hpp"

using namespace scg::cluster;

namespace {

const std::vector<entry> samples = {
    {"s/tenant\x1fuser\x1f" "0b5a6a52-1c1f-4c9e-a3d5-2a4f3b8d9e10", "spark-a", {}, {{1700000000123, 0}, "scg-0"}, false,
     0, 0},
    {"o/op-1", "spark-b", "t\x1fu\x1fs", {{1700000000124, 70000}, "scg-1"}, false, 0, 1700000000000},
    {"o/op-2", {}, {}, {{1700000000200, 3}, "scg-2"}, true, 1700000090000, 0},
    {"", {}, {}, {{0, 0}, ""}, false, 0, 0},  // every field at its smallest
    {std::string(300, 'k'), std::string(200, 'b'), {}, {{UINT64_MAX, UINT32_MAX}, "n"}, true, UINT64_MAX, 0},
};

packed_entries pack(const std::vector<entry>& es) {
  packed_entries p;
  for (const auto& e : es) p.add(e);
  return p;
}

std::vector<entry> unpack(std::string_view bytes, std::string* error = nullptr) {
  std::vector<entry> out;
  packed_reader in(bytes);
  for (entry e; in.next(e);) out.push_back(e);
  if (error) *error = in.error();
  CHECK(in.read() == out.size());
  return out;
}

bool same(const entry& a, const entry& b) {
  return a.key == b.key && a.backend == b.backend && a.session == b.session && a.ver == b.ver &&
         a.deleted == b.deleted && a.tombstone_expires_ms == b.tombstone_expires_ms && a.started_ms == b.started_ms;
}

}  // namespace

TEST_CASE("packed entries read back field for field, one entry's strings reused for the next",
          "[cluster][wire][packed]") {
  const auto p = pack(samples);
  CHECK(p.count == samples.size());
  std::string error;
  const auto back = unpack(p.bytes, &error);
  CHECK(error.empty());
  REQUIRE(back.size() == samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    INFO("entry " << i);
    CHECK(same(back[i], samples[i]));
  }
  // A view of the table packs as the entry it shows.
  packed_entries from_view;
  const auto& e = samples[1];
  from_view.add(entry_view{e.key, e.backend, e.session, e.ver.node, e.ver.time, e.deleted, e.tombstone_expires_ms,
                           e.started_ms});
  CHECK(from_view.bytes == pack({e}).bytes);
  // A session binding takes about its strings' bytes and a dozen more.
  CHECK(pack({samples[0]}).bytes.size() == 1 + samples[0].key.size() + 1 + 7 + 1 + 1 + 5 + 6 + 1 + 1 + 1);
  CHECK(pack({}).bytes.empty());
  CHECK(unpack("").empty());
}

TEST_CASE("packed entries cut short or with bad bytes stop there and say where", "[cluster][wire][packed]") {
  const auto p = pack(samples);
  // Ends of whole entries, from the sizes of each packed alone.
  std::vector<std::size_t> ends;
  std::size_t at = 0;
  for (const auto& e : samples) ends.push_back(at += pack({e}).bytes.size());
  for (std::size_t cut = 0; cut < p.bytes.size(); ++cut) {
    INFO("cut at " << cut);
    std::string error;
    const auto back = unpack(std::string_view(p.bytes).substr(0, cut), &error);
    const auto whole = static_cast<std::size_t>(std::count_if(ends.begin(), ends.end(), [&](auto e) { return e <= cut; }));
    CHECK(back.size() == whole);
    const bool at_an_end = cut == 0 || std::find(ends.begin(), ends.end(), cut) != ends.end();
    CHECK(error.empty() == at_an_end);
    if (!at_an_end) CHECK_THAT(error, Catch::Contains("of entry " + std::to_string(whole)));
  }

  // Flags with a bit no version defines.
  auto bad = pack({samples[0]}).bytes;
  bad[bad.size() - 2] = '\x02';
  std::string error;
  CHECK(unpack(bad, &error).empty());
  CHECK_THAT(error, Catch::Contains("unknown bits in the flags of entry 0"));

  // A length past the end of the message.
  CHECK(unpack(std::string("\x05" "ab", 3), &error).empty());
  CHECK_THAT(error, Catch::Contains("length past the end in the key"));

  // A varint that never ends, and a logical counter above 32 bits.
  CHECK(unpack(std::string(11, '\xff'), &error).empty());
  CHECK_THAT(error, Catch::Contains("varint longer than 10 bytes"));
  std::string wide("\0\0\0\0\x01", 5);
  wide += std::string("\x80\x80\x80\x80\x10", 5);  // 2^32
  wide += std::string("\0\0", 2);
  CHECK(unpack(wide, &error).empty());
  CHECK_THAT(error, Catch::Contains("value above 32 bits in the logical counter"));

  // What came before bad bytes stands.
  auto two = pack({samples[1]}).bytes + "\x7f";
  const auto back = unpack(two, &error);
  REQUIRE(back.size() == 1);
  CHECK(same(back[0], samples[1]));
  CHECK_FALSE(error.empty());
}

// core/protowire.hpp: the one protobuf wire reader, field by field (next)
// and walking in place across segments (walk), and its writers.
#include <catch2/catch.hpp>

#include <random>

#include "core/protowire.hpp"

namespace pw = scg::core::protowire;

namespace {

/// Every field of `msg` by next(); false when it stops on bad bytes.
bool all_by_next(std::string_view msg, std::vector<pw::field>& out) {
  out.clear();
  while (!msg.empty()) {
    pw::field f;
    if (!pw::next(msg, f)) return false;
    out.push_back(f);
  }
  return true;
}

/// walk() over `msg` cut into segments of `piece` bytes.
bool walk_pieces(const std::string& msg, std::size_t piece, std::string& reason) {
  std::vector<pw::segment> segs;
  for (std::size_t at = 0; at < msg.size(); at += piece)
    segs.push_back({reinterpret_cast<const std::uint8_t*>(msg.data()) + at, std::min(piece, msg.size() - at)});
  pw::reader r(segs.data(), segs.size());
  return pw::walk(r, reason, pw::skip_field);
}

}  // namespace

TEST_CASE("next reads every wire type, and whole spans each field byte for byte", "[protowire]") {
  std::string msg;
  pw::put_uint(msg, 1, 300);
  pw::put_bytes(msg, 2, "hello");
  pw::put_tag(msg, 3, 5);
  msg.append("\x01\x02\x03\x04", 4);  // fixed32
  pw::put_tag(msg, 4, 1);
  msg.append(8, '\x07');  // fixed64
  pw::put_tag(msg, 5, 3);  // a group holding a varint, then its end
  pw::put_uint(msg, 1, 7);
  pw::put_tag(msg, 5, 4);
  std::vector<pw::field> fields;
  REQUIRE(all_by_next(msg, fields));
  REQUIRE(fields.size() == 5);
  CHECK(fields[0].number == 1);
  CHECK(fields[0].varint == 300);
  CHECK(fields[1].payload == "hello");
  CHECK(fields[2].type == 5);
  CHECK(fields[3].type == 1);
  CHECK(fields[4].type == 3);
  std::string back;
  for (const auto& f : fields) back += f.whole;
  CHECK(back == msg);
}

TEST_CASE("next refuses malformed bytes with the checks walk makes", "[protowire]") {
  std::vector<pw::field> fields;
  const std::vector<std::string> bad = {
      std::string("\x08", 1),                   // varint cut short
      std::string("\x00\x01", 2),               // field number 0
      std::string("\x12\x05" "abc", 5),         // length past the end
      std::string("\x0c", 1),                   // end of a group never opened
      std::string("\x0b\x08\x01", 3),           // group never closed
      std::string("\x0f", 1),                   // wire type 7
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // varint of 11 bytes
  };
  for (const auto& b : bad) {
    INFO("bytes of size " << b.size());
    CHECK_FALSE(all_by_next(b, fields));
    std::string reason;
    CHECK_FALSE(walk_pieces(b, 1, reason));
    CHECK_FALSE(reason.empty());
  }
  // 33 nested groups: deeper than either accepts; 32 are fine.
  auto nested = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) pw::put_tag(s, 1, 3);
    for (int i = 0; i < depth; ++i) pw::put_tag(s, 1, 4);
    return s;
  };
  std::string reason;
  CHECK(all_by_next(nested(32), fields));
  CHECK(walk_pieces(nested(32), 3, reason));
  CHECK_FALSE(all_by_next(nested(34), fields));
  CHECK_FALSE(walk_pieces(nested(34), 3, reason));
}

TEST_CASE("next and walk agree on every byte string, however it is cut", "[protowire]") {
  std::mt19937 gen(15);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 24);
  // Mostly valid fields with a mutated byte now and then.
  for (int round = 0; round < 5000; ++round) {
    std::string msg;
    const int n = len(gen) / 4;
    for (int i = 0; i < n; ++i) {
      if (byte(gen) % 2)
        pw::put_uint(msg, 1 + byte(gen) % 20, static_cast<std::uint64_t>(byte(gen)) << (byte(gen) % 40));
      else
        pw::put_bytes(msg, 1 + byte(gen) % 20, std::string(static_cast<std::size_t>(len(gen)), 'x'));
    }
    if (!msg.empty() && byte(gen) % 3 == 0) msg[static_cast<std::size_t>(byte(gen)) % msg.size()] = static_cast<char>(byte(gen));
    std::vector<pw::field> fields;
    const bool by_next = all_by_next(msg, fields);
    std::string reason;
    INFO("round " << round);
    CHECK(walk_pieces(msg, 1 + static_cast<std::size_t>(byte(gen)) % 7, reason) == by_next);
  }
}

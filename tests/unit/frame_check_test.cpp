#include "cluster/frame_check.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using scg::cluster::frame_check;

namespace {

void put(std::vector<unsigned char>& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

/// A BASP frame: header (type, 2 padding bytes, flags, length, data, source,
/// destination; big-endian) and `payload` bytes of 'x'.
std::vector<unsigned char> frame(unsigned type, std::uint32_t payload, std::uint64_t data = 0,
                                 std::uint64_t source = 0, std::uint64_t dest = 0) {
  std::vector<unsigned char> out{static_cast<unsigned char>(type), 0, 0, 0};
  put(out, payload, 4);
  put(out, data, 8);
  put(out, source, 8);
  put(out, dest, 8);
  out.insert(out.end(), payload, 'x');
  return out;
}

std::vector<unsigned char> operator+(std::vector<unsigned char> a, const std::vector<unsigned char>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string feed_all(frame_check& c, const std::vector<unsigned char>& bytes) {
  return c.feed(bytes.data(), bytes.size());
}

}  // namespace

TEST_CASE("frame_check passes a dialer's ordinary stream, in any split", "[frame_check]") {
  const auto stream = frame(1, 40) + frame(1, 40) + frame(2, 300, 0, 7, 9) + frame(6, 0) + frame(3, 20, 0, 1, 2) +
                      frame(4, 16) + frame(5, 8, 0, 3, 0) + frame(2, 70000, 0, 1, 2);
  for (std::size_t step : {std::size_t{1}, std::size_t{5}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                           std::size_t{4096}, stream.size()}) {
    frame_check c;
    for (std::size_t at = 0; at < stream.size(); at += step) {
      const auto n = std::min(step, stream.size() - at);
      REQUIRE(c.feed(stream.data() + at, n).empty());
    }
    CHECK(c.frames() == 8);
  }
}

TEST_CASE("frame_check refuses what would crash or bloat CAF", "[frame_check]") {
  SECTION("a handshake without payload (CAF 0.17.6 reads it through a null pointer)") {
    frame_check c;
    CHECK(feed_all(c, frame(1, 0)) == "malformed frame of type 1");
  }
  SECTION("the same after a good handshake") {
    frame_check c;
    CHECK(feed_all(c, frame(1, 40) + frame(1, 0)) == "malformed frame of type 1");
  }
  SECTION("a server handshake from a dialer") {
    frame_check c;
    CHECK(feed_all(c, frame(1, 40) + frame(0, 0, 1)) == "a server handshake from a dialer");
  }
  SECTION("anything but a handshake first") {
    frame_check c;
    CHECK(feed_all(c, frame(6, 0)) == "the first frame is not a handshake (type 6)");
  }
  SECTION("a length over the limit") {
    frame_check c;
    auto big = frame(1, 40);
    auto over = frame(2, 0, 0, 1, 2);  // then the length patched in
    const std::uint32_t len = frame_check::max_payload + 1;
    for (int i = 0; i < 4; ++i) over[4 + i] = static_cast<unsigned char>(len >> (8 * (3 - i)));
    CHECK(feed_all(c, big + over).find("over the limit") != std::string::npos);
  }
  SECTION("a handshake over its limit (a node id is a few dozen bytes)") {
    frame_check c;
    CHECK(feed_all(c, frame(1, frame_check::max_handshake_payload + 1)).find("a handshake of") == 0);
    frame_check ok;
    CHECK(feed_all(ok, frame(1, frame_check::max_handshake_payload)).empty());
  }
  SECTION("unknown types and CAF's own malformed cases") {
    frame_check a, b, d;
    CHECK(feed_all(a, frame(1, 40) + frame(7, 4)) == "unknown frame type 7");
    CHECK(feed_all(b, frame(1, 40) + frame(2, 8, 0, 1, 0)) == "malformed frame of type 2");  // no destination
    CHECK(feed_all(d, frame(1, 40) + frame(6, 4)) == "malformed frame of type 6");          // a heartbeat with payload
  }
  SECTION("refused stays refused; the bytes before the bad frame passed") {
    frame_check c;
    const auto good = frame(1, 40);
    CHECK(c.feed(good.data(), good.size()).empty());
    const auto bad = frame(1, 0);
    CHECK(!c.feed(bad.data(), bad.size()).empty());
    CHECK(!c.feed(good.data(), good.size()).empty());
  }
}

TEST_CASE("frame_check says when the dialer's handshake has arrived whole", "[frame_check]") {
  const auto stream = frame(1, 40) + frame(2, 300, 0, 7, 9);
  frame_check c;
  for (std::size_t at = 0; at < stream.size(); ++at) {
    CHECK(c.handshake_done() == (at >= 32 + 40));  // nothing before the handshake's last byte
    REQUIRE(c.feed(stream.data() + at, 1).empty());
  }
  CHECK(c.handshake_done());
  frame_check bad;
  CHECK(!feed_all(bad, frame(1, 0)).empty());
  CHECK_FALSE(bad.handshake_done());
}

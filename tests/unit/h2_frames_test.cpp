// GCC's -Wuse-after-free cannot see that a chunk's count stays above zero
// while several slices of it go out of scope one after another (the counts
// are checked through opaque Catch calls in between), and warns on every
// such scope end in this file. The paths it warns about cannot happen.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

#include "net/h2/bytes.hpp"
#include "net/h2/grpc_frames.hpp"

#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace scg::net::h2;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

// --- helpers for chunk / slice ---------------------------------------------------

/// A chunk holding `text`, with one reference owned by the caller.
chunk* chunk_of(std::string_view text) { return chunk::copy_of(text); }

/// True when `s` points into `c`'s bytes (so no copy was made).
bool inside(const slice& s, chunk* c) {
  return s.data() >= c->data() && s.data() + s.size() <= c->data() + c->capacity;
}

// --- helpers for the message splitter --------------------------------------------

struct message {
  bool compressed;
  std::string body;
};

std::string frame(const message& m) {
  std::string out(1, m.compressed ? '\x01' : '\x00');
  const auto n = static_cast<std::uint32_t>(m.body.size());
  out += static_cast<char>(n >> 24);
  out += static_cast<char>((n >> 16) & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  out += static_cast<char>(n & 0xff);
  return out + m.body;
}

/// Several messages: ordinary, zero-length (plain and compressed), compressed,
/// and one whose length needs two bytes of the prefix.
std::vector<message> sample_messages() {
  std::string long_body;
  for (int i = 0; i < 300; ++i) long_body += static_cast<char>('a' + i % 26);
  return {
      {false, "abc"},
      {false, ""},
      {true, "\x1f\x8b\x08zipped"},
      {false, std::string("\x00\x00\x00\x00\x05", 5)},  // body that looks like a prefix
      {true, ""},
      {false, long_body},
      {false, "z"},
  };
}

std::string stream_of(const std::vector<message>& ms) {
  std::string s;
  for (const auto& m : ms) s += frame(m);
  return s;
}

/// What the sink saw, with the number of bytes it had received at the time.
struct event {
  enum kind_t { header, end } kind;
  std::size_t at;
  bool compressed = false;
  std::uint32_t length = 0;
  bool operator==(const event& o) const {
    return kind == o.kind && at == o.at && compressed == o.compressed && length == o.length;
  }
};

std::ostream& operator<<(std::ostream& os, const event& e) {
  if (e.kind == event::header)
    return os << "header@" << e.at << "(" << (e.compressed ? "C" : "-") << "," << e.length << ")";
  return os << "end@" << e.at;
}

/// The events a correct splitter produces for `ms`: header() right after the
/// 5 prefix bytes, before any body byte; message_end() right after the last.
std::vector<event> expected_events(const std::vector<message>& ms) {
  std::vector<event> ev;
  std::size_t at = 0;
  for (const auto& m : ms) {
    at += 5;
    ev.push_back({event::header, at, m.compressed, static_cast<std::uint32_t>(m.body.size())});
    at += m.body.size();
    ev.push_back({event::end, at});
  }
  return ev;
}

/// Message boundaries (offsets where a stream may end) of `ms`.
std::vector<std::size_t> boundaries(const std::vector<message>& ms) {
  std::vector<std::size_t> b{0};
  for (const auto& m : ms) b.push_back(b.back() + 5 + m.body.size());
  return b;
}

struct recording_sink {
  chunk* source = nullptr;  // every slice must point into it
  std::string bytes_seen;
  std::vector<event> events;
  bool all_inside = true;
  bool any_empty = false;
  int refuse_header = -1;  // index of the header() that returns false
  int headers = 0;

  std::size_t prefix_bytes = 0;  // bytes flagged as a message prefix
  void bytes(slice s, bool prefix) {
    if (prefix) prefix_bytes += s.size();
    if (s.empty()) any_empty = true;
    if (source && !inside(s, source)) all_inside = false;
    bytes_seen.append(s.view());
  }
  bool header(const message_header& h) {
    events.push_back({event::header, bytes_seen.size(), h.compressed, h.length});
    return headers++ != refuse_header;
  }
  void message_end() { events.push_back({event::end, bytes_seen.size()}); }
};

/// Feeds `stream` cut at `cuts` (sorted offsets) and checks everything the
/// sink and the splitter report. Slices share one chunk.
void check_split(const std::vector<message>& ms, const std::string& stream, const std::vector<std::size_t>& cuts) {
  chunk* c = chunk_of(stream);
  const auto bounds = boundaries(ms);
  {
    message_splitter sp;
    recording_sink sink;
    sink.source = c;
    std::size_t from = 0;
    auto points = cuts;
    points.push_back(stream.size());
    for (auto to : points) {
      REQUIRE(sp.feed(slice(c, from, to - from), sink));
      from = to;
      // at_boundary() exactly at message boundaries; messages() counts the ends so far.
      const bool at_bound = std::find(bounds.begin(), bounds.end(), to) != bounds.end();
      REQUIRE(sp.at_boundary() == at_bound);
      const auto done = static_cast<std::uint64_t>(std::upper_bound(bounds.begin(), bounds.end(), to) - bounds.begin() - 1);
      REQUIRE(sp.messages() == done);
    }
    REQUIRE(sink.bytes_seen == stream);
    REQUIRE(sink.events == expected_events(ms));
    REQUIRE(sink.all_inside);
    REQUIRE_FALSE(sink.any_empty);
    REQUIRE(sp.messages() == ms.size());
    REQUIRE(sp.at_boundary());
  }
  // The splitter and the sink kept no slice: only our own reference is left.
  REQUIRE(c->refs == 1);
  c->unref();
}

// --- helpers for inflate ---------------------------------------------------------

std::string compress(std::string_view data, int window_bits, int level = Z_DEFAULT_COMPRESSION) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  REQUIRE(rc == Z_STREAM_END);
  return out;
}
std::string gzip(std::string_view data) { return compress(data, 16 + MAX_WBITS); }
std::string zdeflate(std::string_view data) { return compress(data, MAX_WBITS); }

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, 255);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(d(rng));
  return s;
}

std::string repetitive(std::size_t n) {
  std::string s;
  s.reserve(n);
  while (s.size() < n) s += "spark connect gateway ";
  s.resize(n);
  return s;
}

}  // namespace

// ================================================================================
// chunk and slice
// ================================================================================

TEST_CASE("chunk make and copy_of start with one reference", "[h2]") {
  chunk* c = chunk::make(16);
  CHECK(c->refs == 1);
  CHECK(c->capacity == 16);
  c->unref();

  chunk* d = chunk::copy_of("hello");
  CHECK(d->refs == 1);
  CHECK(d->capacity == 5);
  CHECK(std::string_view(d->data(), 5) == "hello");
  d->unref();

  chunk* e = chunk::copy_of("");
  CHECK(e->refs == 1);
  CHECK(e->capacity == 0);
  e->unref();
}

TEST_CASE("slice copies share one chunk and count references", "[h2]") {
  chunk* c = chunk_of("0123456789");
  {
    slice a(c, 2, 5);  // takes its own reference
    CHECK(c->refs == 2);
    CHECK(a.view() == "23456");
    CHECK(a.size() == 5);
    CHECK_FALSE(a.empty());
    CHECK(a.data() == c->data() + 2);
    {
      slice b(a);
      CHECK(c->refs == 3);
      CHECK(b.data() == a.data());
      CHECK(b.view() == "23456");
      slice d;
      d = b;  // copy assignment
      CHECK(c->refs == 4);
      CHECK(d.view() == "23456");
      d = d;  // self assignment keeps the count
      CHECK(c->refs == 4);
    }
    CHECK(c->refs == 2);

    slice m(std::move(a));  // a move takes no new reference
    CHECK(c->refs == 2);
    CHECK(m.view() == "23456");
    CHECK(a.empty());
    CHECK(a.size() == 0);
    CHECK(a.data() == nullptr);

    slice n;
    n = std::move(m);  // move assignment neither
    CHECK(c->refs == 2);
    CHECK(n.view() == "23456");
    CHECK(m.empty());

    n = slice();  // assigning an empty slice drops the reference
    CHECK(c->refs == 1);
    CHECK(n.empty());
  }
  CHECK(c->refs == 1);
  c->unref();
}

TEST_CASE("slice adopt takes over the caller's reference", "[h2]") {
  chunk* c = chunk_of("abcdef");
  c->ref();  // the test's own reference, to observe the count
  REQUIRE(c->refs == 2);
  {
    slice s = slice::adopt(c, 4);
    CHECK(c->refs == 2);  // no new reference: the one handed over
    CHECK(s.view() == "abcd");
    CHECK(s.data() == c->data());
  }
  CHECK(c->refs == 1);  // the adopted reference went with the slice
  c->unref();
}

TEST_CASE("a chunk lives while any slice refers to it", "[h2]") {
  chunk* c = chunk_of("keep me alive please");
  c->ref();  // observer
  std::optional<slice> owner(std::in_place, slice::adopt(c, 20));
  std::optional<slice> a(std::in_place, *owner);
  slice last = owner->take_front(7);  // "keep me"
  CHECK(c->refs == 4);
  owner.reset();
  CHECK(c->refs == 3);
  a.reset();
  CHECK(c->refs == 2);
  // The original owner and the other copy are gone; the bytes are still there.
  CHECK(last.view() == "keep me");
  last = slice();
  CHECK(c->refs == 1);  // only the observer is left
  c->unref();
}

TEST_CASE("slice take_front splits one slice into two sharing the chunk", "[h2]") {
  chunk* c = chunk_of("headerbody!");
  {
    slice s(c, 0, 11);
    REQUIRE(c->refs == 2);
    slice front = s.take_front(6);
    CHECK(c->refs == 3);
    CHECK(front.view() == "header");
    CHECK(s.view() == "body!");
    CHECK(front.size() == 6);
    CHECK(s.size() == 5);
    CHECK(front.data() == c->data());
    CHECK(s.data() == c->data() + 6);

    slice none = s.take_front(0);
    CHECK(none.empty());
    CHECK(s.view() == "body!");

    slice all = s.take_front(5);
    CHECK(all.view() == "body!");
    CHECK(s.empty());
    CHECK(s.view().empty());

    // Splitting an offset slice keeps offsets relative to it.
    slice mid(c, 3, 6);  // "derbod"
    slice f2 = mid.take_front(2);
    CHECK(f2.view() == "de");
    CHECK(mid.view() == "rbod");
    CHECK(mid.data() == c->data() + 5);
  }
  CHECK(c->refs == 1);
  c->unref();
}

TEST_CASE("slice copy_of copies the bytes into a chunk of its own", "[h2]") {
  std::string src = std::string("bin\0ary", 7);
  slice s = slice::copy_of(src);
  CHECK(s.size() == 7);
  CHECK(s.view() == src);
  CHECK(s.data() != src.data());
  src[0] = 'X';  // the copy does not follow the source
  CHECK(s.view() == std::string("bin\0ary", 7));

  slice t(s);
  CHECK(t.data() == s.data());  // copies of it share its chunk

  slice e = slice::copy_of("");
  CHECK(e.empty());
  CHECK(e.view().empty());
}

TEST_CASE("slice_queue counts bytes and ignores empty slices", "[h2]") {
  slice_queue q;
  CHECK(q.empty());
  CHECK(q.bytes() == 0);
  q.push(slice::copy_of("abc"));
  q.push(slice());
  q.push(slice::copy_of(""));
  q.push(slice::copy_of("defg"));
  CHECK(q.bytes() == 7);
  CHECK_FALSE(q.empty());
  CHECK(q.items().size() == 2);
  q.clear();
  CHECK(q.empty());
  CHECK(q.bytes() == 0);
  CHECK(q.items().empty());
}

TEST_CASE("slice_queue pop moves bytes across and inside slice boundaries", "[h2]") {
  chunk* c = chunk_of("abcdefghi");
  {
    slice_queue q;
    q.push(slice(c, 0, 3));  // abc
    q.push(slice(c, 3, 4));  // defg
    q.push(slice(c, 7, 2));  // hi
    REQUIRE(c->refs == 4);
    REQUIRE(q.bytes() == 9);

    std::vector<std::string> got;
    std::vector<const char*> where;
    auto take = [&](slice s) {
      got.emplace_back(s.view());
      where.push_back(s.data());
    };

    // Nothing.
    CHECK(q.pop(0, take) == 0);
    CHECK(got.empty());
    CHECK(q.bytes() == 9);

    // Inside the first slice.
    CHECK(q.pop(2, take) == 2);
    CHECK(got == std::vector<std::string>{"ab"});
    CHECK(where.back() == c->data());
    CHECK(q.bytes() == 7);
    CHECK(q.items().size() == 3);
    CHECK(q.items().front().view() == "c");
    CHECK(c->refs == 4);  // "ab" was handed out and dropped; "c" still held

    // Across a boundary: the rest of one slice and part of the next.
    got.clear();
    where.clear();
    CHECK(q.pop(4, take) == 4);
    CHECK(got == std::vector<std::string>{"c", "def"});
    CHECK(where[0] == c->data() + 2);
    CHECK(where[1] == c->data() + 3);
    CHECK(q.bytes() == 3);
    CHECK(q.items().size() == 2);
    CHECK(q.items().front().view() == "g");
    CHECK(c->refs == 3);

    // Exactly up to a boundary.
    got.clear();
    CHECK(q.pop(1, take) == 1);
    CHECK(got == std::vector<std::string>{"g"});
    CHECK(q.items().size() == 1);
    CHECK(q.bytes() == 2);

    // More than is queued: all of it, and the count that was moved.
    got.clear();
    CHECK(q.pop(100, take) == 2);
    CHECK(got == std::vector<std::string>{"hi"});
    CHECK(q.empty());
    CHECK(q.bytes() == 0);
    CHECK(q.items().empty());
    CHECK(q.pop(5, take) == 0);
  }
  CHECK(c->refs == 1);
  c->unref();
}

TEST_CASE("slice_queue pop keeps popped slices alive while the consumer holds them", "[h2]") {
  chunk* c = chunk_of("0123456789");
  std::vector<slice> held;
  {
    slice_queue q;
    q.push(slice(c, 0, 10));
    q.pop(3, [&](slice s) { held.push_back(std::move(s)); });
    q.pop(3, [&](slice s) { held.push_back(std::move(s)); });
    CHECK(c->refs == 4);  // queue remainder + two held
    q.clear();
    CHECK(c->refs == 3);
  }
  REQUIRE(held.size() == 2);
  CHECK(held[0].view() == "012");
  CHECK(held[1].view() == "345");
  held.clear();
  CHECK(c->refs == 1);
  c->unref();
}

TEST_CASE("slice_queue pop byte by byte delivers the stream in order", "[h2]") {
  slice_queue q;
  const std::vector<std::string> parts = {"alpha", "b", "gamma-delta", "", "epsilon"};
  std::string all;
  for (const auto& p : parts) {
    q.push(slice::copy_of(p));
    all += p;
  }
  REQUIRE(q.bytes() == all.size());
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> d(1, 6);
  std::string out;
  std::size_t left = all.size();
  for (int i = 0; i < 1000 && !q.empty(); ++i) {
    const auto n = d(rng);
    const auto moved = q.pop(n, [&](slice s) {
      CHECK_FALSE(s.empty());
      out.append(s.view());
    });
    CHECK(moved == std::min(n, left));
    left -= moved;
    CHECK(q.bytes() == left);
  }
  CHECK(q.empty());
  CHECK(out == all);
}

// ================================================================================
// message_prefix and message_splitter
// ================================================================================

TEST_CASE("message_prefix is a zero flag and a big-endian length", "[h2]") {
  CHECK(message_prefix(0) == std::string(5, '\0'));
  CHECK(message_prefix(1) == std::string("\0\0\0\0\x01", 5));
  CHECK(message_prefix(300) == std::string("\0\0\0\x01\x2c", 5));
  CHECK(message_prefix(0x01020304) == std::string("\0\x01\x02\x03\x04", 5));
  CHECK(message_prefix(0xffffffffu) == std::string("\0\xff\xff\xff\xff", 5));
  CHECK(message_prefix(0x00ab0000) == std::string("\0\0\xab\0\0", 5));
  CHECK(message_prefix(77).size() == 5);
}

TEST_CASE("message_prefix frames a message the splitter reads back", "[h2]") {
  for (std::size_t len : {0u, 1u, 255u, 256u, 1000u}) {
    const std::string body(len, 'q');
    const std::string s = message_prefix(len) + body;
    message_splitter sp;
    recording_sink sink;
    REQUIRE(sp.feed(slice::copy_of(s), sink));
    CHECK(sink.bytes_seen == s);
    REQUIRE(sink.events.size() == 2);
    CHECK(sink.events[0] == event{event::header, 5, false, static_cast<std::uint32_t>(len)});
    CHECK(sink.events[1] == event{event::end, 5 + len});
    CHECK(sp.messages() == 1);
    CHECK(sp.at_boundary());
  }
}

TEST_CASE("message_splitter reads the flag and a 4-byte big-endian length", "[h2]") {
  message_splitter sp;
  recording_sink sink;
  REQUIRE(sp.feed(slice::copy_of(std::string("\x01\x01\x02\x03\x04", 5)), sink));
  REQUIRE(sink.events.size() == 1);
  CHECK(sink.events[0].compressed);
  CHECK(sink.events[0].length == 0x01020304u);
  CHECK_FALSE(sp.at_boundary());
  CHECK(sp.messages() == 0);

  message_splitter sp2;
  recording_sink sink2;
  REQUIRE(sp2.feed(slice::copy_of(std::string("\x00\xff\xff\xff\xfe", 5)), sink2));
  REQUIRE(sink2.events.size() == 1);
  CHECK_FALSE(sink2.events[0].compressed);
  CHECK(sink2.events[0].length == 0xfffffffeu);
}

TEST_CASE("message_splitter on an empty slice does nothing", "[h2]") {
  message_splitter sp;
  recording_sink sink;
  CHECK(sp.feed(slice(), sink));
  CHECK(sp.feed(slice::copy_of(""), sink));
  CHECK(sink.bytes_seen.empty());
  CHECK(sink.events.empty());
  CHECK(sp.at_boundary());
  CHECK(sp.messages() == 0);
}

TEST_CASE("message_splitter whole stream in one slice", "[h2]") {
  const auto ms = sample_messages();
  const auto stream = stream_of(ms);
  check_split(ms, stream, {});
}

TEST_CASE("message_splitter at every single split point", "[h2]") {
  const auto ms = sample_messages();
  const auto stream = stream_of(ms);
  for (std::size_t k = 0; k <= stream.size(); ++k) {
    INFO("split at " << k);
    check_split(ms, stream, {k});
  }
}

TEST_CASE("message_splitter at every pair of split points", "[h2]") {
  // A shorter stream so all pairs stay cheap; still holds every kind of message.
  const std::vector<message> ms = {
      {false, "abc"}, {false, ""}, {true, "xy"}, {true, ""}, {false, "hello"},
  };
  const auto stream = stream_of(ms);
  for (std::size_t i = 0; i <= stream.size(); ++i) {
    for (std::size_t j = i; j <= stream.size(); ++j) {
      INFO("split at " << i << " and " << j);
      check_split(ms, stream, {i, j});
    }
  }
}

TEST_CASE("message_splitter one byte at a time", "[h2]") {
  const auto ms = sample_messages();
  const auto stream = stream_of(ms);
  std::vector<std::size_t> cuts;
  for (std::size_t k = 1; k < stream.size(); ++k) cuts.push_back(k);
  check_split(ms, stream, cuts);
}

TEST_CASE("message_splitter at random split points", "[h2]") {
  const auto ms = sample_messages();
  const auto stream = stream_of(ms);
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<std::size_t> where(0, stream.size());
  std::uniform_int_distribution<int> how_many(1, 40);
  for (int round = 0; round < 400; ++round) {
    std::vector<std::size_t> cuts;
    const int n = how_many(rng);
    for (int i = 0; i < n; ++i) cuts.push_back(where(rng));
    std::sort(cuts.begin(), cuts.end());
    INFO("round " << round);
    check_split(ms, stream, cuts);
  }
}

TEST_CASE("message_splitter random messages fed in random pieces", "[h2]") {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> count(1, 12);
  std::uniform_int_distribution<int> len(0, 40);
  std::uniform_int_distribution<int> coin(0, 3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int round = 0; round < 200; ++round) {
    std::vector<message> ms;
    const int n = count(rng);
    for (int i = 0; i < n; ++i) {
      message m{coin(rng) == 0, {}};
      const int l = coin(rng) == 0 ? 0 : len(rng);
      for (int b = 0; b < l; ++b) m.body += static_cast<char>(byte(rng));
      ms.push_back(std::move(m));
    }
    const auto stream = stream_of(ms);
    std::uniform_int_distribution<std::size_t> where(0, stream.size());
    std::vector<std::size_t> cuts;
    const int k = count(rng);
    for (int i = 0; i < k; ++i) cuts.push_back(where(rng));
    std::sort(cuts.begin(), cuts.end());
    INFO("round " << round);
    check_split(ms, stream, cuts);
  }
}

TEST_CASE("message_splitter stops the feed when header returns false", "[h2]") {
  const auto ms = sample_messages();
  const auto stream = stream_of(ms);
  const auto bounds = boundaries(ms);

  for (int refuse = 0; refuse < static_cast<int>(ms.size()); ++refuse) {
    INFO("refusing header " << refuse);
    message_splitter sp;
    recording_sink sink;
    sink.refuse_header = refuse;
    CHECK_FALSE(sp.feed(slice::copy_of(stream), sink));
    // Everything up to and including the refused message's prefix, no more.
    CHECK(sink.bytes_seen == stream.substr(0, bounds[refuse] + 5));
    auto want = expected_events(ms);
    want.resize(2 * refuse + 1);  // the refused header is the last event: no message_end()
    CHECK(sink.events == want);
    CHECK(sp.messages() == static_cast<std::uint64_t>(refuse));
    CHECK_FALSE(sp.at_boundary());
  }
}

TEST_CASE("message_splitter stops mid slice when header returns false in a later feed", "[h2]") {
  const std::vector<message> ms = {{false, "one"}, {false, "two"}};
  const auto stream = stream_of(ms);
  message_splitter sp;
  recording_sink sink;
  sink.refuse_header = 1;
  chunk* c = chunk_of(stream);
  {
    // First feed ends two bytes into the second prefix; the second feed
    // completes it and must stop there, leaving the body undelivered.
    REQUIRE(sp.feed(slice(c, 0, 10), sink));
    CHECK(sp.messages() == 1);
    CHECK_FALSE(sp.feed(slice(c, 10, stream.size() - 10), sink));
    CHECK(sink.bytes_seen == stream.substr(0, 13));
    REQUIRE(sink.events.size() == 3);
    CHECK(sink.events[2] == event{event::header, 13, false, 3});
  }
  CHECK(c->refs == 1);
  c->unref();
}

// ================================================================================
// grpc-timeout
// ================================================================================

TEST_CASE("parse_timeout reads every unit", "[h2]") {
  CHECK(parse_timeout("1H") == nanoseconds(3600s));
  CHECK(parse_timeout("2M") == nanoseconds(120s));
  CHECK(parse_timeout("3S") == nanoseconds(3s));
  CHECK(parse_timeout("4m") == nanoseconds(4ms));
  CHECK(parse_timeout("5u") == nanoseconds(5us));
  CHECK(parse_timeout("6n") == nanoseconds(6));
  CHECK(parse_timeout("100m") == nanoseconds(100ms));
  CHECK(parse_timeout("0S") == nanoseconds(0));
  CHECK(parse_timeout("0n") == nanoseconds(0));
  CHECK(parse_timeout("00000007S") == nanoseconds(7s));  // leading zeros, 8 digits
  CHECK(parse_timeout("12345678n") == nanoseconds(12345678));
  CHECK(parse_timeout("99999999S") == nanoseconds(std::chrono::seconds(99999999)));
  CHECK(parse_timeout("99999999M") == nanoseconds(std::chrono::minutes(99999999)));
  CHECK(parse_timeout("24H") == nanoseconds(std::chrono::hours(24)));
}

TEST_CASE("parse_timeout refuses malformed values", "[h2]") {
  for (const char* bad : {"", "S", "m", "5", "12", "123456789S", "000000001n", "1s", "1h", "1x", "aS", "1aS",
                          "-1S", "+1S", " 1S", "1S ", "1.5S", "1SS", "0x1S", "１S"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(parse_timeout(bad).has_value());
  }
  CHECK_FALSE(parse_timeout(std::string_view("1\0S", 3)).has_value());
}

TEST_CASE("parse_timeout of the largest values stays positive and ordered", "[h2]") {
  // 8 digits of hours is more than int64 nanoseconds hold (about 292 years):
  // the value must not wrap around into a short or negative deadline.
  const nanoseconds m = *parse_timeout("99999999M");
  for (const char* v : {"99999999H", "2562048H", "10000000H", "3000000H"}) {
    INFO(v);
    const auto t = parse_timeout(v);
    REQUIRE(t.has_value());
    CHECK(t->count() > 0);
    CHECK(*t >= m);
  }
  // Below the overflow it is exact.
  CHECK(parse_timeout("1666666H") == nanoseconds(std::chrono::hours(1666666)));
  CHECK(*parse_timeout("99999999H") >= *parse_timeout("2562047H"));
  // And adding it to a steady_clock time does not overflow.
  const auto now = std::chrono::steady_clock::now();
  CHECK(now + *parse_timeout("99999999H") > now);
}

TEST_CASE("format_timeout writes exact small values in nanoseconds", "[h2]") {
  CHECK(format_timeout(nanoseconds(0)) == "0n");
  CHECK(format_timeout(nanoseconds(1)) == "1n");
  CHECK(format_timeout(nanoseconds(99999999)) == "99999999n");
  CHECK(format_timeout(nanoseconds(-1)) == "0n");  // a passed deadline
  CHECK(format_timeout(-5s) == "0n");
}

TEST_CASE("format_timeout picks a coarser unit and rounds up", "[h2]") {
  CHECK(format_timeout(nanoseconds(100000000)) == "100000u");
  CHECK(format_timeout(nanoseconds(100000001)) == "100001u");  // rounds up, never down
  CHECK(format_timeout(nanoseconds(100000999)) == "100001u");
  CHECK(format_timeout(1s) == "1000000u");
  CHECK(format_timeout(100s) == "100000m");
  CHECK(format_timeout(100s + nanoseconds(1)) == "100001m");
  CHECK(format_timeout(std::chrono::hours(1)) == "3600000m");
  CHECK(format_timeout(std::chrono::seconds(99999999)) == "99999999S");
  CHECK(format_timeout(std::chrono::seconds(99999999) + nanoseconds(1)) == "1666667M");
  CHECK(format_timeout(std::chrono::seconds(100000000)) == "1666667M");
  CHECK(format_timeout(std::chrono::minutes(99999999)) == "99999999M");
  CHECK(format_timeout(std::chrono::minutes(100000000)) == "1666667H");
}

TEST_CASE("format_timeout of the largest duration keeps 8 digits", "[h2]") {
  const auto s = format_timeout(nanoseconds::max());
  INFO(s);
  // ceil(9223372036854775807 ns / 1 h) = 2562048 hours.
  CHECK(s == "2562048H");
  const auto near = format_timeout(nanoseconds(nanoseconds::max().count() - 1));
  CHECK(near == "2562048H");
}

TEST_CASE("format_timeout round trips values that fit their unit", "[h2]") {
  const char units[] = {'n', 'u', 'm', 'S', 'M', 'H'};
  for (char u : units) {
    for (std::int64_t v : {0LL, 1LL, 7LL, 59LL, 60LL, 999LL, 1000LL, 1001LL, 123456LL, 1666666LL, 99999999LL}) {
      if (u == 'H' && v > 1666666) continue;  // beyond what int64 nanoseconds hold exactly
      const std::string text = std::to_string(v) + u;
      INFO(text);
      const auto t = parse_timeout(text);
      REQUIRE(t.has_value());
      const auto f = format_timeout(*t);
      INFO(f);
      CHECK(parse_timeout(f) == t);
    }
  }
}

TEST_CASE("format_timeout never shrinks a duration and keeps at most 8 digits", "[h2]") {
  // unit sizes in nanoseconds, in format_timeout's order
  struct unit {
    char c;
    std::int64_t ns;
  };
  const unit units[] = {{'n', 1},
                        {'u', 1000},
                        {'m', 1000000},
                        {'S', 1000000000},
                        {'M', 60LL * 1000000000},
                        {'H', 3600LL * 1000000000}};
  std::mt19937_64 rng(42);
  // Up to 99999999 minutes: the range parse_timeout reads exactly.
  const std::int64_t top = 99999999LL * 60 * 1000000000;
  for (int i = 0; i < 20000; ++i) {
    // Spread over magnitudes: a random number of significant bits.
    const int bits = static_cast<int>(rng() % 63);
    std::int64_t n = static_cast<std::int64_t>(rng() >> (64 - std::max(bits, 1)));
    if (n > top) n = top;
    const nanoseconds t(n);
    const auto s = format_timeout(t);
    INFO(n << " -> " << s);
    REQUIRE(s.size() >= 2);
    CHECK(s.size() <= 9);  // at most 8 digits and the unit
    const auto back = parse_timeout(s);
    REQUIRE(back.has_value());
    CHECK(*back >= t);  // rounds up
    // The unit is the finest that fits in 8 digits, so the rounding is less
    // than one of it.
    const auto it = std::find_if(std::begin(units), std::end(units), [&](const unit& x) { return x.c == s.back(); });
    REQUIRE(it != std::end(units));
    CHECK((*back - t).count() < it->ns);
    if (it != std::begin(units)) {
      const auto finer = (it - 1)->ns;
      CHECK((n + finer - 1) / finer > 99999999);
    }
  }
}

// ================================================================================
// grpc-message percent-encoding
// ================================================================================

TEST_CASE("percent_encode leaves printable ASCII other than percent", "[h2]") {
  std::string printable;
  for (int c = 0x20; c <= 0x7e; ++c)
    if (c != '%') printable += static_cast<char>(c);
  CHECK(percent_encode(printable) == printable);
  CHECK(percent_encode("Hello, World! ~{}[]") == "Hello, World! ~{}[]");
  CHECK(percent_encode("") == "");
}

TEST_CASE("percent_encode escapes percent and controls and non-ASCII as uppercase hex", "[h2]") {
  CHECK(percent_encode("%") == "%25");
  CHECK(percent_encode("100%") == "100%25");
  CHECK(percent_encode("a\nb") == "a%0Ab");
  CHECK(percent_encode("\r\t") == "%0D%09");
  CHECK(percent_encode(std::string_view("\0", 1)) == "%00");
  CHECK(percent_encode("\x1f") == "%1F");
  CHECK(percent_encode("\x7f") == "%7F");
  CHECK(percent_encode("\x80\xff") == "%80%FF");
  CHECK(percent_encode("caf\xc3\xa9") == "caf%C3%A9");  // UTF-8 é
  for (int c = 0; c < 256; ++c) {
    const std::string one(1, static_cast<char>(c));
    const auto e = percent_encode(one);
    INFO(c);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      CHECK(e == one);
    } else {
      REQUIRE(e.size() == 3);
      CHECK(e[0] == '%');
      CHECK(std::stoi(e.substr(1), nullptr, 16) == c);
      CHECK(e.find_first_not_of("0123456789ABCDEF", 1) == std::string::npos);  // uppercase hex
    }
  }
}

TEST_CASE("percent_decode inverts percent_encode for all 256 byte values", "[h2]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const auto enc = percent_encode(all);
  for (unsigned char c : enc) CHECK((c >= 0x20 && c <= 0x7e));
  CHECK(percent_decode(enc) == all);
  // Reversed and doubled as well.
  std::string rev(all.rbegin(), all.rend());
  CHECK(percent_decode(percent_encode(rev + all)) == rev + all);
}

TEST_CASE("percent_decode reads both hex cases", "[h2]") {
  CHECK(percent_decode("caf%C3%A9") == "caf\xc3\xa9");
  CHECK(percent_decode("caf%c3%a9") == "caf\xc3\xa9");
  CHECK(percent_decode("%41") == "A");  // an escape right at the end
  CHECK(percent_decode("x%41") == "xA");
  CHECK(percent_decode("%25") == "%");
  CHECK(percent_decode("%2541") == "%41");  // decodes once
  CHECK(percent_decode("%00") == std::string(1, '\0'));
  CHECK(percent_decode("plain text") == "plain text");
  CHECK(percent_decode("") == "");
}

TEST_CASE("percent_decode keeps malformed escapes as they are", "[h2]") {
  CHECK(percent_decode("%") == "%");
  CHECK(percent_decode("%4") == "%4");
  CHECK(percent_decode("abc%") == "abc%");
  CHECK(percent_decode("abc%2") == "abc%2");
  CHECK(percent_decode("%G1") == "%G1");
  CHECK(percent_decode("%4G") == "%4G");
  CHECK(percent_decode("%zz%41") == "%zzA");
  CHECK(percent_decode("%%41") == "%A");
  CHECK(percent_decode("100% sure") == "100% sure");
  CHECK(percent_decode("%-1") == "%-1");
}

// ================================================================================
// base64
// ================================================================================

TEST_CASE("base64_encode matches the RFC 4648 test vectors", "[h2]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foob") == "Zm9vYg==");
  CHECK(base64_encode("fooba") == "Zm9vYmE=");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
}

TEST_CASE("base64_encode handles binary bytes with the standard alphabet", "[h2]") {
  CHECK(base64_encode(std::string_view("\0", 1)) == "AA==");
  CHECK(base64_encode(std::string_view("\0\0\0", 3)) == "AAAA");
  CHECK(base64_encode("\xff\xff\xff") == "////");
  CHECK(base64_encode("\xfb\xff") == "+/8=");
  const std::string bin("\x00\xff", 2);
  CHECK(base64_encode(bin) == "AP8=");
  // Long input: no line breaks, length 4 * ceil(n / 3).
  const std::string big(1000, 'x');
  const auto e = base64_encode(big);
  CHECK(e.size() == 4 * ((1000 + 2) / 3));
  CHECK(e.find('\n') == std::string::npos);
}

// ================================================================================
// inflate
// ================================================================================

TEST_CASE("inflate decodes gzip and deflate data", "[h2]") {
  const std::vector<std::string> inputs = {
      "hello, spark connect",
      "",
      std::string("\0\x01\x02", 3),
      repetitive(200000),     // inflates to many times the compressed size
      random_bytes(50000, 3),  // incompressible
  };
  for (const auto& data : inputs) {
    INFO("size " << data.size());
    const auto g = gzip(data);
    const auto d = zdeflate(data);
    REQUIRE(g.size() >= 2);
    CHECK(static_cast<unsigned char>(g[0]) == 0x1f);  // a real gzip header
    CHECK(static_cast<unsigned char>(g[1]) == 0x8b);

    const auto gi = inflate("gzip", g, 1 << 20);
    REQUIRE(gi.has_value());
    CHECK(*gi == data);
    const auto di = inflate("deflate", d, 1 << 20);
    REQUIRE(di.has_value());
    CHECK(*di == data);
  }
}

TEST_CASE("inflate decodes data compressed at every level", "[h2]") {
  const auto data = repetitive(30000) + random_bytes(3000, 11);
  for (int level = 0; level <= 9; ++level) {
    INFO("level " << level);
    CHECK(inflate("gzip", compress(data, 16 + MAX_WBITS, level), data.size()) == data);
    CHECK(inflate("deflate", compress(data, MAX_WBITS, level), data.size()) == data);
  }
}

TEST_CASE("inflate refuses an encoding other than gzip and deflate", "[h2]") {
  const auto g = gzip("payload");
  for (const char* enc : {"identity", "snappy", "", "GZIP", "x-gzip", "br", "zstd"}) {
    INFO(enc);
    CHECK_FALSE(inflate(enc, g, 1 << 20).has_value());
  }
}

TEST_CASE("inflate refuses the other format", "[h2]") {
  const std::string data = "some message body";
  CHECK_FALSE(inflate("deflate", gzip(data), 1 << 20).has_value());
  CHECK_FALSE(inflate("gzip", zdeflate(data), 1 << 20).has_value());
}

TEST_CASE("inflate refuses corrupt data", "[h2]") {
  const auto data = repetitive(10000);
  const auto g = gzip(data);
  const auto d = zdeflate(data);

  CHECK_FALSE(inflate("gzip", random_bytes(100, 5), 1 << 20).has_value());
  CHECK_FALSE(inflate("deflate", random_bytes(100, 6), 1 << 20).has_value());
  CHECK_FALSE(inflate("gzip", "", 1 << 20).has_value());
  CHECK_FALSE(inflate("deflate", "", 1 << 20).has_value());

  // Truncated: every shorter prefix fails.
  for (std::size_t n = 0; n < g.size(); n += 1 + n / 8) {
    INFO("gzip prefix " << n);
    CHECK_FALSE(inflate("gzip", g.substr(0, n), 1 << 20).has_value());
  }
  CHECK_FALSE(inflate("gzip", g.substr(0, g.size() - 1), 1 << 20).has_value());
  for (std::size_t n = 0; n < d.size(); n += 1 + n / 8) {
    INFO("deflate prefix " << n);
    CHECK_FALSE(inflate("deflate", d.substr(0, n), 1 << 20).has_value());
  }
  CHECK_FALSE(inflate("deflate", d.substr(0, d.size() - 1), 1 << 20).has_value());

  // A wrong checksum: gzip's CRC-32 trailer, deflate's (zlib) Adler-32 trailer.
  auto bad_crc = g;
  bad_crc[bad_crc.size() - 6] ^= 0x55;
  CHECK_FALSE(inflate("gzip", bad_crc, 1 << 20).has_value());
  auto bad_len = g;
  bad_len[bad_len.size() - 1] ^= 0x01;  // ISIZE
  CHECK_FALSE(inflate("gzip", bad_len, 1 << 20).has_value());
  auto bad_adler = d;
  bad_adler[bad_adler.size() - 1] ^= 0x01;
  CHECK_FALSE(inflate("deflate", bad_adler, 1 << 20).has_value());
  // A broken header.
  auto bad_magic = g;
  bad_magic[0] = 0x1e;
  CHECK_FALSE(inflate("gzip", bad_magic, 1 << 20).has_value());
}

TEST_CASE("inflate refuses output past the limit", "[h2]") {
  const auto data = repetitive(100000);
  const auto g = gzip(data);
  const auto d = zdeflate(data);

  CHECK_FALSE(inflate("gzip", g, data.size() - 1).has_value());
  CHECK_FALSE(inflate("deflate", d, data.size() - 1).has_value());
  CHECK_FALSE(inflate("gzip", g, 4096).has_value());
  CHECK_FALSE(inflate("gzip", g, 1).has_value());
  CHECK_FALSE(inflate("gzip", g, 0).has_value());

  // Exactly the limit is allowed.
  CHECK(inflate("gzip", g, data.size()) == data);
  CHECK(inflate("deflate", d, data.size()) == data);

  // A small message near the limit, in both directions.
  const std::string small = "0123456789abcdef";
  CHECK(inflate("gzip", gzip(small), small.size()) == small);
  CHECK_FALSE(inflate("gzip", gzip(small), small.size() - 1).has_value());
  CHECK(inflate("deflate", zdeflate(small), small.size()) == small);
  CHECK_FALSE(inflate("deflate", zdeflate(small), small.size() - 1).has_value());
}

TEST_CASE("slice_queue compact copies slices out of shared chunks, keeps order and marks, frees the chunk",
          "[h2]") {
  std::atomic<std::int64_t> ledger{0};
  chunk_ledger = &ledger;
  chunk* big = chunk::make(256u << 10);  // a read buffer, shared by several streams' slices
  std::memset(big->data(), 'x', big->capacity);
  std::memcpy(big->data() + 100, "hello", 5);
  CHECK(ledger.load() == (256 << 10));
  slice_queue q;
  q.push(slice(big, 100, 5), true);
  q.push(slice::copy_of(" world"), false);  // already its own chunk: left alone
  big->unref();                              // the reader moved on; the queue alone keeps it
  CHECK(ledger.load() == (256 << 10) + 6);
  CHECK(q.compact() == 5);
  CHECK(ledger.load() == 5 + 6);  // the read buffer is gone
  CHECK(q.compact() == 0);        // nothing left to gain
  std::string out;
  std::size_t marked = 0;
  q.pop(q.bytes(), [&](slice s) { out += s.view(); }, &marked);
  CHECK(out == "hello world");
  CHECK(marked == 5);
  CHECK(ledger.load() == 0);
  chunk_ledger = nullptr;
}

TEST_CASE("slice_queue debts: a rewritten slice owes what the original took, paid when its last byte leaves",
          "[h2]") {
  slice_queue q;
  q.push_owing(slice::copy_of("rewritten!"), 7);  // 10 bytes standing for 7 received
  q.push(slice::copy_of("abc"), true);
  CHECK(q.owed() == 10);
  std::size_t paid = 0;
  q.pop(4, [](slice) {}, &paid);
  CHECK(paid == 4);  // never more than the bytes that left
  q.pop(6, [](slice) {}, &paid);
  CHECK(paid == 7);  // the rest of its debt with its last byte
  slice_queue to;
  q.move_to(to);
  CHECK(q.empty());
  CHECK(to.owed() == 3);
  CHECK(to.clear() == 3);
}

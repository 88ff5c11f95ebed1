// The relay (net/relay.hpp) alone: one direction of a call, fed DATA in
// arbitrary chunks, with a recording side in place of the call.

#include "net/relay.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace scg::net;
using scg::net::h2::message_header;
using scg::net::h2::slice;
using scg::net::h2::slice_queue;

namespace {

/// A gRPC message on the wire: prefix and body.
std::string frame(const std::string& body, bool compressed = false) {
  std::string out(1, compressed ? '\x01' : '\x00');
  const auto n = static_cast<std::uint32_t>(body.size());
  out += static_cast<char>(n >> 24);
  out += static_cast<char>((n >> 16) & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  out += static_cast<char>(n & 0xff);
  return out + body;
}

/// The bytes queued in `q`, in order.
std::string text_of(const slice_queue& q) {
  std::string out;
  q.for_each([&out](const slice& s) { out.append(s.data(), s.size()); });
  return out;
}

/// A call as the relay sees it: it records what the relay asks and decides
/// by `hold` which messages are read whole.
struct recording_side {
  bool done = false;                   // finished()
  std::vector<bool> hold;              // begin()'s answer per message (default: pass)
  std::size_t given_back = 0, wakes = 0, body_bytes = 0, ends = 0;
  std::vector<message_header> begun;
  std::vector<message_header> refused;
  std::vector<held_message> whole_messages;

  bool finished() const { return done; }
  void give_back(std::size_t n) { given_back += n; }
  void wake() { ++wakes; }
  void refuse(const message_header& h) {
    refused.push_back(h);
    done = true;  // as the call does: it answers, and is finished
  }
  bool begin(const message_header& h) {
    begun.push_back(h);
    return begun.size() <= hold.size() && hold[begun.size() - 1];
  }
  void body(const slice& s) { body_bytes += s.size(); }
  void end() { ++ends; }
  void whole(held_message m) { whole_messages.push_back(std::move(m)); }
};

/// Feeds `bytes` to `r` in chunks of `step` bytes.
void feed_in_chunks(relay& r, recording_side& side, const std::string& bytes, std::size_t step) {
  for (std::size_t at = 0; at < bytes.size(); at += step)
    r.feed(slice::copy_of(std::string_view(bytes).substr(at, step)), side);
}

constexpr std::uint32_t window = 1u << 20;
constexpr std::size_t max_message = 1u << 16;

}  // namespace

TEST_CASE("relay: messages split across chunks pass through in order", "[relay]") {
  const std::string wire = frame("hello") + frame("") + frame(std::string(300, 'x')) + frame("z", true);
  for (std::size_t step : {1u, 2u, 3u, 5u, 7u, 64u, 4096u}) {
    slice_queue out;
    relay r(out, window, max_message);
    recording_side side;
    feed_in_chunks(r, side, wire, step);
    INFO("chunks of " << step);
    CHECK(text_of(out) == wire);  // every byte, prefixes included, in order
    CHECK(r.messages() == 4);
    REQUIRE(side.begun.size() == 4);
    CHECK(side.begun[0].length == 5);
    CHECK(side.begun[1].length == 0);
    CHECK(side.begun[2].length == 300);
    CHECK(side.begun[3].compressed);
    CHECK(side.ends == 4);
    CHECK(side.body_bytes == 5 + 0 + 300 + 1);
    CHECK(side.whole_messages.empty());
    CHECK(side.given_back == 0);  // passing bytes owe their window until they leave
    CHECK(out.owed() == wire.size());
    CHECK(r.prefix_bytes() == 0);
    CHECK(r.held_bytes() == wire.size());
  }
}

TEST_CASE("relay: a message held whole, then released behind what passed", "[relay]") {
  // The request direction: the first message is read (routing), later ones pass.
  const std::string first = frame("first message"), second = frame("second");
  slice_queue out;
  relay r(out, window, max_message);
  recording_side side;
  side.hold = {true, false};
  feed_in_chunks(r, side, first + second.substr(0, 7), 4);
  REQUIRE(side.whole_messages.size() == 1);
  CHECK(text_of(out) == second.substr(0, 7));  // the second passes as it comes: the first waits
  auto& msg = side.whole_messages[0];
  CHECK(msg.header.length == 13);
  CHECK(msg.flat_body() == "first message");
  CHECK(msg.bytes.owed() == first.size());  // it fits in the window: it owes it until it leaves
  CHECK(r.held_bytes() == 7);               // the held message left the relay with whole()

  // Released (the backend chosen): it queues behind what is there.
  r.send(std::move(msg));
  feed_in_chunks(r, side, second.substr(7), 2);
  CHECK(text_of(out) == second.substr(0, 7) + first + second.substr(7));
  CHECK(r.messages() == 2);
}

TEST_CASE("relay: a held message larger than the window gives its window back at once", "[relay]") {
  const std::string big = frame(std::string(100, 'b'));
  slice_queue out;
  relay r(out, /*window=*/64, max_message);
  recording_side side;
  side.hold = {true};
  feed_in_chunks(r, side, big, 10);
  REQUIRE(side.whole_messages.size() == 1);
  CHECK(side.given_back == big.size());  // its sender could never finish it otherwise
  CHECK(side.whole_messages[0].bytes.owed() == 0);
  CHECK(out.empty());
}

TEST_CASE("relay: a message over the limit is refused, and what came before it still goes", "[relay]") {
  // The response direction: the client keeps the messages before the refused one.
  const std::string ok = frame("ok"), too_big = frame(std::string(40, 'x'));
  slice_queue out;
  relay r(out, window, /*max_message=*/16);
  recording_side side;
  feed_in_chunks(r, side, ok + too_big + ok, 3);
  REQUIRE(side.refused.size() == 1);
  CHECK(side.refused[0].length == 40);
  CHECK(text_of(out) == ok);  // nothing of the refused message passed, not even its prefix
  // Everything from the refused prefix on is given back to the producer.
  CHECK(side.given_back == too_big.size() + ok.size());
  CHECK(r.prefix_bytes() == 0);
}

TEST_CASE("relay: a finished call gives every byte back", "[relay]") {
  const std::string wire = frame("abc") + frame("def");
  slice_queue out;
  relay r(out, window, max_message);
  recording_side side;
  side.hold = {true};
  feed_in_chunks(r, side, wire.substr(0, 6), 6);  // half the first (held) message
  side.done = true;
  feed_in_chunks(r, side, wire.substr(6), 6);
  CHECK(side.whole_messages.empty());  // a finished call reads no more
  CHECK(out.empty());
  CHECK(side.given_back == wire.size() - 6);
}

TEST_CASE("message_reader reads a body once: plain slices, or inflated", "[relay]") {
  slice_queue out;
  relay r(out, window, max_message);
  recording_side side;
  side.hold = {true, true};
  // The body spread over several slices.
  feed_in_chunks(r, side, frame("spread over slices"), 4);
  REQUIRE(side.whole_messages.size() == 1);
  const std::string no_encoding;
  message_reader plain(side.whole_messages[0], no_encoding, max_message);
  REQUIRE(plain.readable());
  std::string joined;
  for (const auto& seg : plain.view()) joined.append(reinterpret_cast<const char*>(seg.data), seg.size);
  CHECK(joined == "spread over slices");
  CHECK(plain.text() == "spread over slices");

  // A compressed body that is not gzip cannot be read.
  feed_in_chunks(r, side, frame("not gzip", true), 64);
  REQUIRE(side.whole_messages.size() == 2);
  const std::string gzip = "gzip";
  message_reader bad(side.whole_messages[1], gzip, max_message);
  CHECK_FALSE(bad.readable());
  CHECK_FALSE(bad.too_large());
  CHECK(bad.view().empty());

  // A rewrite replaces the body its readers see.
  auto rewritten = message_of("new body", side.whole_messages[0]);
  CHECK(rewritten.bytes.owed() == side.whole_messages[0].bytes.owed());
  CHECK(rewritten.flat_body() == "new body");
}

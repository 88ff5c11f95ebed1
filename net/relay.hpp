#pragma once
// One direction of a forwarded call, client→backend or backend→client: the
// gRPC messages its DATA splits into, each message's prefix kept until its
// length was checked, the message held whole when scg must read it, and the
// queue its bytes leave by (the data of the pipe the other connection
// frames). forward_call has one relay each way (net/forwarder.cpp); what a
// message means is the call's business, told through a Side (below). Pure:
// no sockets, no nghttp2 (tests/unit/relay_test.cpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "net/h2/bytes.hpp"
#include "net/h2/grpc_frames.hpp"
#include "net/wire.hpp"

namespace scg::net {

/// One whole gRPC message as it arrived: its prefix and body, in slices.
struct held_message {
  h2::slice_queue bytes;
  h2::message_header header;

  /// The body as scanner segments (the 5-byte prefix skipped; no copy).
  segments body() const;
  /// The body in one string (a copy).
  std::string flat_body() const;
};

/// A second handle on `msg`'s bytes (no copy), owing no window: a call
/// keeps it to send the message again.
held_message share(const held_message& msg);

/// A message scg wrote in place of `original` (a rewrite): uncompressed, and
/// owing the window the original took.
held_message message_of(std::string_view body, const held_message& original);

/// A held message's body as scg reads it: scanner segments over its own
/// slices when it came uncompressed, else its bytes inflated, once however
/// many readers ask (a scan, a rewrite, a check of its options).
class message_reader {
 public:
  /// `msg` and `encoding` (its grpc-encoding) outlive the reader; inflating
  /// stops past `limit` bytes.
  message_reader(const held_message& msg, const std::string& encoding, std::size_t limit)
      : msg_(msg), encoding_(encoding), limit_(limit) {}

  /// False when it came compressed and cannot be inflated (an encoding scg
  /// cannot read, corrupt data, or past the limit: too_large()).
  bool readable();
  bool too_large() const { return too_large_; }
  /// The body as scanner segments; readable() first.
  segments view();
  /// The body in one string (the inflated bytes, or a copy made once); readable() first.
  const std::string& text();
  /// The message was rewritten: its body is now `body`.
  void replace(std::string body) { text_ = std::move(body); }

 private:
  const held_message& msg_;
  const std::string& encoding_;
  const std::size_t limit_;
  std::optional<std::string> text_;  // inflated, copied or rewritten
  bool loaded_ = false, failed_ = false, too_large_ = false;
};

/// One direction of a call. Bytes pass as they come; a message is held whole
/// only when the call must read it (Side::begin says). A `Side` is a
/// template parameter (no virtual call per message or slice) and gives:
///   bool finished()                         the call has its status: bytes are given back, not passed
///   void give_back(std::size_t n)           the producer may send `n` more bytes (its stream window)
///   void wake()                             bytes were queued to leave: the consumer's stream resumes
///   void refuse(const h2::message_header&)  a message over the limit: the call ends (what came before it still goes)
///   bool begin(const h2::message_header&)   a message within the limit starts: true to hold it whole
///   void body(const h2::slice&)             its body bytes, as they come (held or not)
///   void end()                              its last byte came
///   void whole(held_message)                a held message is complete (not once finished)
class relay {
 public:
  /// `out`: the queue bytes leave by (the pipe's data); `window`: the HTTP/2
  /// stream window; `max_message`: limits.max_message_bytes.
  relay(h2::slice_queue& out, std::uint32_t window, std::size_t max_message)
      : out_(out), window_(window), max_message_(max_message) {}
  relay(const relay&) = delete;
  relay& operator=(const relay&) = delete;

  /// DATA that came for this direction.
  template <class Side>
  void feed(h2::slice s, Side& side) {
    if (side.finished()) return side.give_back(s.size());  // answered already: what still comes is dropped
    const auto total = s.size();
    sink<Side> k{*this, side};
    if (!split_.feed(std::move(s), k)) side.give_back(total - k.passed);
  }

  /// Queues `msg` (held, or written by scg) behind what is queued; the
  /// caller wakes the consumer.
  void send(held_message msg) { msg.bytes.move_to(out_); }

  /// Messages completed so far.
  std::uint64_t messages() const { return split_.messages(); }
  /// Bytes of a prefix not yet checked (their window is still owed).
  std::size_t prefix_bytes() const { return prefix_.bytes(); }
  /// What this direction holds: queued to leave, the held message, a prefix.
  std::size_t held_bytes() const { return out_.bytes() + current_.bytes.bytes() + prefix_.bytes(); }
  /// Copies what it holds out of shared read buffers; the bytes copied.
  std::size_t compact() { return out_.compact() + current_.bytes.compact(); }

 private:
  // The splitter's sink: prefix bytes wait in prefix_ until the length was
  // checked, so a refused message sends nothing on and what came before it still goes.
  template <class Side>
  struct sink {
    relay& r;
    Side& side;
    std::size_t passed = 0;
    void bytes(h2::slice s, bool prefix) {
      passed += s.size();
      if (prefix) return r.prefix_.push(std::move(s));
      side.body(s);
      r.take(std::move(s), side);
    }
    bool header(const h2::message_header& h) { return r.start(h, side); }
    void message_end() { r.end(side); }
  };

  template <class Side>
  bool start(const h2::message_header& h, Side& side) {
    if (h.length > max_message_) {
      side.give_back(prefix_.bytes());
      prefix_.clear();
      side.refuse(h);
      return false;
    }
    current_.header = h;  // read by take(), which the prefix reaches first
    holding_ = side.begin(h);
    prefix_.pop(prefix_.bytes(), [this, &side](h2::slice p) { take(std::move(p), side); });
    return true;
  }

  /// Bytes of the current message: passed on, or kept in the held message.
  /// A held message owes its window until it leaves, as passing bytes do,
  /// when it fits in the window; a bigger one could never be finished that
  /// way, and its window goes back at once (it is then held outside flow
  /// control, up to max_message and the worker's buffer budget).
  template <class Side>
  void take(h2::slice s, Side& side) {
    if (side.finished()) return side.give_back(s.size());
    if (!holding_) {
      out_.push(std::move(s), true);
      return side.wake();
    }
    if (current_.header.length + 5 <= window_) return current_.bytes.push(std::move(s), true);
    side.give_back(s.size());
    current_.bytes.push(std::move(s));
  }

  template <class Side>
  void end(Side& side) {
    side.end();
    if (!holding_ || side.finished()) return;
    held_message msg = std::move(current_);
    current_ = held_message{};
    side.whole(std::move(msg));
  }

  h2::slice_queue& out_;
  const std::uint32_t window_;
  const std::size_t max_message_;
  h2::message_splitter split_;
  h2::slice_queue prefix_;  // the current message's prefix, until its length was checked
  held_message current_;    // the message being held (holding_)
  bool holding_ = false;
};

}  // namespace scg::net

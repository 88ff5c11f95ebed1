#pragma once
// gRPC over HTTP/2, the parts a forwarder needs without a gRPC library: the
// 5-byte message prefix, grpc-timeout, the encoding of grpc-message and
// grpc-status-details-bin, and inflating a compressed message to read it.
// Pure: no sockets, no nghttp2.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/h2/bytes.hpp"

namespace scg::net::h2 {

/// The prefix of every gRPC message: compressed flag and length.
struct message_header {
  bool compressed = false;
  std::uint32_t length = 0;
};

/// Splits a byte stream into gRPC messages. feed() hands every byte on, in
/// order, as slices to `sink.bytes(slice, prefix)` (`prefix`: the bytes are
/// part of a message's 5-byte prefix, so a sink can hold them until it has
/// checked the length), calls `sink.header(h)` once the prefix is complete (a
/// false return stops the feed) and `sink.message_end()` after the last byte.
class message_splitter {
 public:
  template <class Sink>
  bool feed(slice s, Sink& sink) {
    while (!s.empty()) {
      if (in_header_ < 5) {
        const auto n = std::min<std::size_t>(5 - in_header_, s.size());
        std::memcpy(prefix_ + in_header_, s.data(), n);
        in_header_ += n;
        sink.bytes(s.take_front(n), true);
        if (in_header_ < 5) continue;
        header_.compressed = prefix_[0] != 0;
        header_.length = (std::uint32_t(std::uint8_t(prefix_[1])) << 24) |
                         (std::uint32_t(std::uint8_t(prefix_[2])) << 16) |
                         (std::uint32_t(std::uint8_t(prefix_[3])) << 8) | std::uint32_t(std::uint8_t(prefix_[4]));
        left_ = header_.length;
        if (!sink.header(header_)) return false;
        if (left_ == 0) end(sink);
        continue;
      }
      const auto n = std::min<std::size_t>(left_, s.size());
      left_ -= n;
      sink.bytes(s.take_front(n), false);
      if (left_ == 0) end(sink);
    }
    return true;
  }
  /// True between messages (a stream may end only there).
  bool at_boundary() const { return in_header_ == 0; }
  /// Messages completed so far.
  std::uint64_t messages() const { return messages_; }

 private:
  template <class Sink>
  void end(Sink& sink) {
    in_header_ = 0;
    ++messages_;
    sink.message_end();
  }

  char prefix_[5] = {};
  std::size_t in_header_ = 0;
  std::uint64_t left_ = 0;
  message_header header_;
  std::uint64_t messages_ = 0;
};

/// The 5-byte prefix of an uncompressed message of `length` bytes.
std::string message_prefix(std::size_t length);

/// grpc-timeout ("100m", "5S", at most 8 digits and one of H M S m u n);
/// nullopt when malformed.
std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view text);
/// `t` as grpc-timeout, rounded up to the unit that keeps it in 8 digits.
std::string format_timeout(std::chrono::nanoseconds t);

/// grpc-message's percent-encoding: bytes outside 0x20..0x7e and '%' as %XX.
std::string percent_encode(std::string_view text);
/// The inverse; malformed escapes are kept as they are.
std::string percent_decode(std::string_view text);

/// Standard base64 with padding (the -bin metadata encoding).
std::string base64_encode(std::string_view bytes);

/// The bytes of a compressed message under grpc-encoding `encoding` ("gzip"
/// or "deflate"); nullopt when the encoding is not one of those, the data is
/// corrupt or it inflates past `limit` bytes (then `*too_large`, when
/// given, is set true).
std::optional<std::string> inflate(std::string_view encoding, std::string_view bytes, std::size_t limit,
                                   bool* too_large = nullptr);

}  // namespace scg::net::h2

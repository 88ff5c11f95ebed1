#pragma once
// Checks, frame by frame, the bytes a dialer sends to the cluster port before
// CAF reads them. CAF 0.17.6's BASP broker takes a handshake header that
// announces no payload and then reads the payload through a null pointer:
// 32 bytes from anyone who reached a plain-TCP cluster port ended the
// process. It also makes room at once for whatever length a header
// announces. The cluster guard (cluster/cluster_guard.cpp) relays each
// connection to CAF through this check and drops one that fails it.
// Pure, no sockets (tests/unit/frame_check_test.cpp).
//
// A BASP header is 32 bytes, integers big-endian: the frame type (1 byte),
// two padding bytes, flags (1), the payload's length (4), operation data
// (8), the source actor (8) and the destination actor (8); the payload
// follows. A dialer's first frame is its handshake.

#include <cstddef>
#include <cstdint>
#include <string>

namespace scg::cluster {

class frame_check {
 public:
  static constexpr std::size_t header_size = 32;
  /// The longest payload a frame may announce. Today's replicas send
  /// messages of 4,096 entries (about 400 KB); a 0.1.0 replica sends its
  /// micro-batches whole, which a refresh of many bindings makes large.
  static constexpr std::uint32_t max_payload = 256u << 20;
  /// The longest handshake a dialer may send: CAF's carries only the
  /// dialer's node id (a few dozen bytes).
  static constexpr std::uint32_t max_handshake_payload = 64u << 10;

  /// Takes the stream's next `n` bytes. Empty while all is well; once a
  /// frame fails, why (and the same for every later call).
  std::string feed(const unsigned char* data, std::size_t n);

  /// Frames checked whole (headers read).
  std::uint64_t frames() const { return frames_; }

  /// Whether the dialer's first frame, its handshake, has arrived whole
  /// (header and payload) and passed.
  bool handshake_done() const { return refused_.empty() && (frames_ > 1 || (frames_ == 1 && payload_left_ == 0)); }

 private:
  std::string check_header() const;

  unsigned char header_[header_size] = {};
  std::size_t have_ = 0;            // header bytes read so far
  std::uint64_t payload_left_ = 0;  // payload bytes still to pass
  std::uint64_t frames_ = 0;
  std::string refused_;
};

}  // namespace scg::cluster

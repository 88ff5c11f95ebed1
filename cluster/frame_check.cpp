#include "cluster/frame_check.hpp"

#include <algorithm>

namespace scg::cluster {

namespace {

std::uint64_t big_endian(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// BASP's frame types (caf/io/basp/message_type.hpp).
enum : unsigned char {
  server_handshake = 0,
  client_handshake = 1,
  direct_message = 2,
  routed_message = 3,
  monitor_message = 4,
  down_message = 5,
  heartbeat = 6,
};

}  // namespace

std::string frame_check::check_header() const {
  const unsigned type = header_[0];
  const auto payload = big_endian(header_ + 4, 4);
  const auto data = big_endian(header_ + 8, 8);
  const auto source = big_endian(header_ + 16, 8);
  const auto dest = big_endian(header_ + 24, 8);
  if (frames_ == 0 && type != client_handshake)
    return "the first frame is not a handshake (type " + std::to_string(type) + ")";
  if (frames_ == 0 && payload > max_handshake_payload)
    return "a handshake of " + std::to_string(payload) + " bytes, over the limit of " +
           std::to_string(max_handshake_payload);
  if (payload > max_payload)
    return "a frame announces " + std::to_string(payload) + " bytes, over the limit of " +
           std::to_string(max_payload);
  // As CAF's own check (caf/io/basp/header.cpp), and a handshake must carry one.
  bool ok = false;
  switch (type) {
    case server_handshake: return "a server handshake from a dialer";
    case client_handshake: ok = payload > 0 && source == 0 && dest == 0; break;
    case direct_message:
    case routed_message: ok = payload > 0 && dest != 0; break;
    case monitor_message: ok = payload > 0 && data == 0; break;
    case down_message: ok = payload > 0 && data == 0 && source != 0 && dest == 0; break;
    case heartbeat: ok = payload == 0 && data == 0 && source == 0 && dest == 0; break;
    default: return "unknown frame type " + std::to_string(type);
  }
  return ok ? std::string() : "malformed frame of type " + std::to_string(type);
}

std::string frame_check::feed(const unsigned char* data, std::size_t n) {
  while (refused_.empty() && n > 0) {
    if (payload_left_ > 0) {
      const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(payload_left_, n));
      payload_left_ -= k;
      data += k;
      n -= k;
      continue;
    }
    const auto k = std::min(header_size - have_, n);
    std::copy(data, data + k, header_ + have_);
    have_ += k;
    data += k;
    n -= k;
    if (have_ < header_size) break;
    refused_ = check_header();
    payload_left_ = big_endian(header_ + 4, 4);
    have_ = 0;
    ++frames_;
  }
  return refused_;
}

}  // namespace scg::cluster

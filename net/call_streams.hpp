#pragma once
// The two HTTP/2 streams of a forwarded call and what flows on them, kept
// apart from what the call decides (as Envoy keeps its filter apart from its
// upstream request, and nghttpx keeps one state per direction): the client's
// stream on its connection, the backend's on the worker's connection to it,
// and each way a relay (net/relay.hpp) feeding the pipe the other connection
// frames. forward_call (net/forwarder.cpp) is one; the relays' sides, which
// say what each message means, are its.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "net/h2/connection.hpp"
#include "net/h2/endpoints.hpp"
#include "net/relay.hpp"

namespace scg::net {

class call_streams {
 protected:
  /// The client's `stream` on `down`; messages past `max_message` bytes are refused.
  call_streams(h2::downstream_connection& down, std::int32_t stream, std::size_t max_message);
  /// Drops what is queued either way and gives each producer back the window it is owed.
  ~call_streams();
  call_streams(const call_streams&) = delete;
  call_streams& operator=(const call_streams&) = delete;

  /// A message scg held goes on to the backend.
  void send_to_backend(held_message msg) {
    requests_.send(std::move(msg));
    up_->resume(up_stream_);
  }
  /// A message scg held goes on to the client.
  void send_to_client(held_message msg) {
    responses_.send(std::move(msg));
    down_->resume(down_stream_);
  }
  /// Stops the backend stream (the client is gone, or scg answered).
  void cancel_backend() {
    if (up_ && up_stream_ > 0 && !up_closed_) up_->reset(up_stream_, NGHTTP2_CANCEL);
  }
  /// The client's answer ends with `status`, as trailers after what is queued for it.
  void end_answer(h2::header_list status) {
    to_client_.trailers = std::move(status);
    to_client_.ended = true;
    down_->resume(down_stream_);
  }
  /// What both directions hold (the worker's budget: held_bytes()).
  std::size_t streams_held() const { return requests_.held_bytes() + responses_.held_bytes(); }
  /// Copies it out of shared read buffers (compact()); the bytes copied.
  std::size_t streams_compact() { return requests_.compact() + responses_.compact(); }

  h2::worker& w_;
  std::shared_ptr<h2::downstream_connection> down_;
  const std::int32_t down_stream_;
  std::shared_ptr<h2::upstream_connection> up_;  // once the backend is chosen
  std::int32_t up_stream_ = 0;                   // once its stream opened
  h2::pipe to_backend_, to_client_;              // what the other connection frames
  relay requests_, responses_;                   // client→backend, backend→client
  bool response_started_ = false;  // the client has its response headers: what scg adds is trailers
  bool down_closed_ = false, up_closed_ = false;  // the client's stream, the backend's, closed
};

}  // namespace scg::net

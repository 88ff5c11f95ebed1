#include "net/call_streams.hpp"

#include "net/h2/worker.hpp"

namespace scg::net {

call_streams::call_streams(h2::downstream_connection& down, std::int32_t stream, std::size_t max_message)
    : w_(down.owner()),
      down_(std::static_pointer_cast<h2::downstream_connection>(down.shared_from_this())),
      down_stream_(stream),
      requests_(to_backend_.data, w_.tune().stream_window, max_message),
      responses_(to_client_.data, w_.tune().stream_window, max_message) {
  to_backend_.producer = down_;
  to_backend_.producer_stream = stream;
}

call_streams::~call_streams() {
  to_client_.drop();
  to_backend_.drop();
  if (requests_.prefix_bytes() > 0) down_->consume(down_stream_, requests_.prefix_bytes());
  if (up_ && responses_.prefix_bytes() > 0) up_->consume(up_stream_, responses_.prefix_bytes());
}

}  // namespace scg::net

// The client side: upstream_connection, scg's connection to one backend. Runs
// nghttp2 as the HTTP/2 client, connects (resolve, connect, its timeout) and
// multiplexes the worker's client_stream calls to that backend.
#include "net/h2/endpoints.hpp"

#include "core/address.hpp"
#include "net/h2/connection_helpers.hpp"
#include "net/h2/worker.hpp"

namespace scg::net::h2 {

using detail::nv_of;
using detail::pass_data;
using detail::sv;
using detail::take;

upstream_connection::upstream_connection(worker& w, std::string address, std::chrono::milliseconds connect_timeout,
                                         const tuning& t)
    : connection(w, asio::ip::tcp::socket(w.io())),
      address_(std::move(address)),
      connect_timeout_(connect_timeout),
      resolver_(w.io()),
      timer_(w.io()) {
  static nghttp2_session_callbacks* cbs = [] {
    auto* c = base_callbacks();
    if (!c) return c;
    nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
    return c;
  }();
  keepalive_ = {t.keepalive_interval, t.keepalive_timeout, true};
  writable_ = false;
  // Any failure here (out of memory) leaves broken_ set: connect() closes the connection.
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, t.stream_window},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, t.max_frame},
  };
  open_session(false, cbs, 1000, settings, std::size(settings), t.connection_window);
}

upstream_connection::~upstream_connection() = default;

void upstream_connection::connect() {
  if (!broken_.empty()) return close(broken_);
  const auto target = core::parse_host_port(address_);
  if (!target) return close("bad backend address " + address_ + " (want host:port)");
  auto self = std::static_pointer_cast<upstream_connection>(shared_from_this());
  timer_.expires_after(connect_timeout_);
  timer_.async_wait([this, self](const asio::error_code& ec) {
    if (ec || writable_ || closed()) return;
    close("no connection after " + std::to_string(connect_timeout_.count()) + " ms");
    w_.flush_dirty();
  });
  resolver_.async_resolve(target->host, std::to_string(target->port), [this, self](const asio::error_code& ec,
                                                   asio::ip::tcp::resolver::results_type results) {
    if (closed()) return;
    if (ec) {
      close("cannot resolve " + address_ + ": " + ec.message());
      return w_.flush_dirty();
    }
    asio::async_connect(raw_socket(), results, [this, self](const asio::error_code& cec, const asio::ip::tcp::endpoint&) {
      if (closed()) return;
      if (cec) {
        close("cannot connect to " + address_ + ": " + cec.message());
        return w_.flush_dirty();
      }
      connected();
      w_.flush_dirty();
    });
  });
}

void upstream_connection::connected() {
  timer_.cancel();
  asio::error_code ignored;
  raw_socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  raw_socket().non_blocking(true, ignored);
  writable_ = true;
  dirty();
  start_reading();
}

std::int32_t upstream_connection::submit_request(const std::vector<header_ref>& headers, pipe& body,
                                                 std::shared_ptr<client_stream> call) {
  if (closed()) return NGHTTP2_ERR_INVALID_STATE;
  auto nv = nv_of(headers);
  auto prd = provider(body);
  const auto id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &prd, nullptr);
  if (id > 0) streams_[id] = std::move(call);
  dirty();
  return id;
}

client_stream* upstream_connection::find(std::int32_t stream) {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

void upstream_connection::tick(steady_time now) {
  if (writable_) keepalive_tick(now, !streams_.empty(), "backend", address_);
}

void upstream_connection::on_closed(const std::string& why) {
  going_away_ = true;
  resolver_.cancel();
  timer_.cancel();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, c] : streams) c->on_client_stream_closed(NGHTTP2_INTERNAL_ERROR, why);
}

int upstream_connection::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                                   std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                                   std::uint8_t, void* user) {
  auto* self = static_cast<upstream_connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  self->alive_.on_server_frame();
  if (auto* c = self->find(frame->hd.stream_id))
    c->on_response_header(sv(name, namelen), sv(value, valuelen), frame->headers.cat == NGHTTP2_HCAT_HEADERS);
  return 0;
}

int upstream_connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<upstream_connection*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    self->going_away_ = true;
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  if (auto* c = self->find(frame->hd.stream_id))
    c->on_response_headers_done(frame->headers.cat == NGHTTP2_HCAT_HEADERS,
                                (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
  return 0;
}

int upstream_connection::on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream,
                                       const std::uint8_t* data, std::size_t len, void* user) {
  static_cast<upstream_connection*>(user)->alive_.on_server_frame();
  return pass_data(session, static_cast<upstream_connection*>(user), stream, data, len,
                   &client_stream::on_response_data);
}

int upstream_connection::on_stream_close(nghttp2_session*, std::int32_t stream, std::uint32_t error_code,
                                         void* user) {
  auto* self = static_cast<upstream_connection*>(user);
  if (auto c = take(self->streams_, stream)) c->on_client_stream_closed(error_code, self->closed_why_);
  return 0;
}

}  // namespace scg::net::h2

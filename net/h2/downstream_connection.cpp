// The server side: downstream_connection, a client's connection to scg. Runs
// nghttp2 as the HTTP/2 server, makes a server_stream call per request stream,
// and closes connections that never finish the preface, idle or break HTTP/2.
#include "net/h2/endpoints.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/h2/connection_helpers.hpp"
#include "net/net_stats.hpp"

namespace scg::net::h2 {

using detail::net_log;
using detail::nv_of;
using detail::pass_data;
using detail::secs;
using detail::sv;
using detail::take;

downstream_connection::downstream_connection(worker& w, asio::ip::tcp::socket s, const call_factory& make,
                                             const tuning& t)
    : connection(w, std::move(s)), make_(make), tune_(t) {
  init(t);
}

downstream_connection::downstream_connection(worker& w, std::unique_ptr<tls_socket> s, const call_factory& make,
                                             const tuning& t)
    : connection(w, std::move(s)), make_(make), tune_(t) {
  init(t);
}

downstream_connection::~downstream_connection() = default;

void downstream_connection::init(const tuning& t) {
  keepalive_ = {t.keepalive_interval, t.keepalive_timeout, false};
  static nghttp2_session_callbacks* cbs = [] {
    auto* c = base_callbacks();
    if (!c) return c;
    nghttp2_session_callbacks_set_on_begin_headers_callback(c, &on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(c, &on_frame_send);
    return c;
  }();
  // Any failure here (out of memory) leaves broken_ set: start() closes the connection.
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, t.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, t.stream_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, t.max_header_bytes},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, t.max_frame},
  };
  open_session(true, cbs, 0, settings, std::size(settings), t.connection_window);
}

void downstream_connection::start() {
  if (!broken_.empty()) return close(broken_);
  asio::error_code ignored;
  raw_socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  raw_socket().non_blocking(true, ignored);
  dirty();
  start_reading();
}

server_stream* downstream_connection::find(std::int32_t stream) {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool downstream_connection::submit_response(std::int32_t stream, const header_list& headers, pipe* body) {
  if (closed()) return false;
  auto nv = nv_of(headers);
  int rv;
  if (body) {
    auto prd = provider(*body);
    rv = nghttp2_submit_response(session_, stream, nv.data(), nv.size(), &prd);
  } else {
    rv = nghttp2_submit_response(session_, stream, nv.data(), nv.size(), nullptr);
  }
  dirty();
  return rv == 0;
}

void downstream_connection::go_away() {
  if (closed()) return;
  if (!check(nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                                   NGHTTP2_NO_ERROR, nullptr, 0),
             "nghttp2_submit_goaway"))
    return;
  dirty();
}

std::vector<std::shared_ptr<server_stream>> downstream_connection::calls() const {
  std::vector<std::shared_ptr<server_stream>> out;
  for (const auto& [id, c] : streams_) out.push_back(c);
  return out;
}

void downstream_connection::tick(steady_time now) {
  if (closed()) return;
  auto& m = global_net_stats();
  if (!preface_done_) {
    if (now - born_ < tune_.handshake_timeout) return;
    core::bump(m.conn_handshake_timeouts_total);
    static core::log_throttle throttle;
    if (auto held = throttle.pass(); held >= 0)
      net_log().info("handshake_timeout peer={} timeout_ms={} suppressed={}", peer(), tune_.handshake_timeout.count(),
                     held);
    return close("no HTTP/2 preface within " + secs(tune_.handshake_timeout) + " (limits.handshake_timeout_secs)");
  }
  if (!keepalive_tick(now, !streams_.empty(), "client", "client")) return;
  if (goaway_sent_) {
    if (now - *goaway_sent_ >= std::chrono::seconds(5)) close("idle: closed after its GOAWAY");
    return;
  }
  if (streams_.empty() && tune_.idle_timeout.count() > 0 && now - idle_since_ >= tune_.idle_timeout) {
    core::bump(m.conn_idle_closed_total);
    net_log().debug("idle_connection_closed peer={} idle_ms={}", peer(), tune_.idle_timeout.count());
    goaway_sent_ = now;
    // GOAWAY, then the session ends.
    if (!check(nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR), "nghttp2_session_terminate_session"))
      return;
    dirty();
    return;
  }
  // A call may end itself here: tick a copy.
  std::vector<std::shared_ptr<server_stream>> open;
  open.reserve(streams_.size());
  for (const auto& [id, c] : streams_) open.push_back(c);
  for (auto& c : open) c->tick(now);
}

void downstream_connection::on_closed(const std::string& why) {
  if (tune_.client_connections) tune_.client_connections->fetch_sub(1, std::memory_order_relaxed);
  // The client broke HTTP/2 (nghttp2 sent a GOAWAY for it, or refused what it read): counted and logged once.
  if (!protocol_error_.empty() || why.rfind("HTTP/2 error", 0) == 0) {
    core::bump(global_net_stats().conn_protocol_errors_total);
    static core::log_throttle throttle;
    if (auto held = throttle.pass(); held >= 0)
      net_log().info("client_protocol_error peer={} goaway=\"{}\" closed=\"{}\" suppressed={}", closed_peer(),
                     protocol_error_, why, held);
  }

  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, c] : streams) c->on_server_stream_closed(NGHTTP2_CANCEL);
}

int downstream_connection::on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<downstream_connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  self->header_bytes_ = 0;
  self->streams_[frame->hd.stream_id] = self->make_(*self, frame->hd.stream_id);
  return 0;
}

int downstream_connection::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                                     std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                                     std::uint8_t, void* user) {
  auto* self = static_cast<downstream_connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: none in gRPC
  auto* c = self->find(frame->hd.stream_id);
  if (!c) return 0;
  const bool was_over = self->header_bytes_ > self->tune_.max_header_bytes;
  self->header_bytes_ += namelen + valuelen + 32;
  if (self->header_bytes_ <= self->tune_.max_header_bytes) {
    c->on_request_header(sv(name, namelen), sv(value, valuelen));
  } else if (!was_over) {
    // nghttp2 decodes the rest (HPACK state needs it); the call keeps none of it.
    c->on_request_headers_too_large(self->tune_.max_header_bytes);
  }
  return 0;
}

int downstream_connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<downstream_connection*>(user);
  if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK)) self->preface_done_ = true;
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  auto* c = self->find(frame->hd.stream_id);
  if (!c) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    c->on_request_headers_done();
    c = self->find(frame->hd.stream_id);  // the call may have ended already
  }
  if (c && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) c->on_request_end();
  return 0;
}

int downstream_connection::on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  // nghttp2 answers a client's protocol error with a GOAWAY naming it: kept for the close.
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    auto* self = static_cast<downstream_connection*>(user);
    self->protocol_error_ = std::string(nghttp2_http2_strerror(frame->goaway.error_code)) + " " +
                            std::string(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                                        std::min<std::size_t>(frame->goaway.opaque_data_len, 200));
  }
  // Answered before the client ended its request (a refusal, a timeout):
  // the stream is reset NO_ERROR, as gRPC servers do, so it ends now and
  // its call with it, however the client goes on.
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0 &&
      !static_cast<downstream_connection*>(user)->check(
          nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR),
          "nghttp2_submit_rst_stream"))
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  return 0;
}

int downstream_connection::on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream,
                                         const std::uint8_t* data, std::size_t len, void* user) {
  return pass_data(session, static_cast<downstream_connection*>(user), stream, data, len,
                   &server_stream::on_request_data);
}

int downstream_connection::on_stream_close(nghttp2_session*, std::int32_t stream, std::uint32_t error_code,
                                           void* user) {
  auto* self = static_cast<downstream_connection*>(user);
  if (auto c = take(self->streams_, stream)) c->on_server_stream_closed(error_code);
  if (self->streams_.empty()) self->idle_since_ = std::chrono::steady_clock::now();
  return 0;
}

}  // namespace scg::net::h2

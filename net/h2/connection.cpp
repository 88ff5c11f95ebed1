#include "net/h2/connection.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <spdlog/spdlog.h>

#include "core/address.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/h2/endpoints.hpp"
#include "net/h2/worker.hpp"

namespace scg::net::h2 {

namespace {

/// Batches larger than this wait for the write in flight before taking more frames.
constexpr std::size_t max_batch_bytes = 1u << 20;

template <class Headers>
std::vector<nghttp2_nv> nv_of(const Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const auto& h : headers)
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(), h.value.size(),
                  NGHTTP2_NV_FLAG_NONE});
  return nv;
}

std::string_view sv(const std::uint8_t* p, std::size_t n) { return {reinterpret_cast<const char*>(p), n}; }

/// Removes `stream`'s call from `streams` and returns it (null when none).
template <class Map>
typename Map::mapped_type take(Map& streams, std::int32_t stream) {
  auto it = streams.find(stream);
  if (it == streams.end()) return {};
  auto c = std::move(it->second);
  streams.erase(it);
  return c;
}

/// Hands a DATA payload to the stream's call, as a slice of the read buffer.
/// The connection window goes back at once: the bytes are in their stream's
/// queue now, bounded by the stream's window, which goes back only when they
/// leave (a stream whose reader stalls holds back no other stream).
template <class Conn, class Call>
int pass_data(nghttp2_session* session, Conn* self, std::int32_t stream, const std::uint8_t* data, std::size_t len,
              void (Call::*deliver)(slice)) {
  nghttp2_session_consume_connection(session, len);
  if (auto* c = self->find(stream)) (c->*deliver)(self->slice_of(data, len));
  return 0;
}

spdlog::logger& net_log() {
  static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  return *log;
}

/// "8 s" for log lines and reasons.
std::string secs(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s" : std::to_string(d.count()) + " ms";
}

}  // namespace

// --- pipes --------------------------------------------------------------------

void pipe::drop() {
  const auto owed = data.clear();
  if (auto p = producer.lock(); p && owed > 0) p->consume(producer_stream, owed);
}

// --- the connection -------------------------------------------------------------

connection::connection(worker& w, asio::ip::tcp::socket s) : w_(w), plain_(std::move(s)) {}

connection::connection(worker& w, std::unique_ptr<tls_socket> s)
    : w_(w), tls_(std::move(s)), tls_buf_(16384) {}

connection::~connection() {
  if (session_) nghttp2_session_del(session_);
}

asio::ip::tcp::socket& connection::raw_socket() { return tls_ ? tls_->next_layer() : *plain_; }

std::string connection::peer() const {
  asio::error_code ec;
  auto ep = const_cast<connection*>(this)->raw_socket().remote_endpoint(ec);
  if (ec) return "unknown";
  if (ep.address().is_v6()) return "ipv6:[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
  return "ipv4:" + ep.address().to_string() + ":" + std::to_string(ep.port());
}

void connection::batch::add_ctrl(const std::uint8_t* p, std::size_t n) {
  if (!pieces.empty() && pieces.back().bytes.empty() && pieces.back().ctrl_off + pieces.back().ctrl_len == ctrl.size()) {
    pieces.back().ctrl_len += n;
  } else {
    pieces.push_back({slice(), ctrl.size(), n});
  }
  ctrl.append(reinterpret_cast<const char*>(p), n);
  bytes += n;
}

void connection::batch::add_slice(slice s) {
  bytes += s.size();
  pieces.push_back({std::move(s), 0, 0});
}

nghttp2_session_callbacks* connection::base_callbacks() {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_send_data_callback(cbs, &connection::on_send_data);
  return cbs;
}

nghttp2_data_provider connection::provider(pipe& p) {
  nghttp2_data_provider prd;
  prd.source.ptr = &p;
  prd.read_callback = &connection::on_read_data;
  return prd;
}

ssize_t connection::on_read_data(nghttp2_session* session, std::int32_t stream, std::uint8_t*, std::size_t length,
                                 std::uint32_t* flags, nghttp2_data_source* source, void*) {
  auto* p = static_cast<pipe*>(source->ptr);
  const std::size_t n = std::min(length, p->data.bytes());
  if (n == 0 && !p->ended) return NGHTTP2_ERR_DEFERRED;
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == p->data.bytes() && p->ended) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (p->trailers) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      auto nv = nv_of(*p->trailers);
      nghttp2_submit_trailer(session, stream, nv.data(), nv.size());
    }
  }
  return static_cast<ssize_t>(n);
}

int connection::on_send_data(nghttp2_session*, nghttp2_frame* frame, const std::uint8_t* framehd, std::size_t length,
                             nghttp2_data_source* source, void* user) {
  auto* self = static_cast<connection*>(user);
  auto* p = static_cast<pipe*>(source->ptr);
  self->filling_.add_ctrl(framehd, 9);
  const std::size_t pad = frame->data.padlen;
  if (pad > 0) {
    const std::uint8_t len = static_cast<std::uint8_t>(pad - 1);
    self->filling_.add_ctrl(&len, 1);
  }
  std::size_t owed = 0;
  p->data.pop(length, [self](slice s) { self->filling_.add_slice(std::move(s)); }, &owed);
  if (pad > 1) {
    static const std::uint8_t zeros[256] = {};
    self->filling_.add_ctrl(zeros, pad - 1);
  }
  if (owed > 0)
    if (auto producer = p->producer.lock()) producer->consume(p->producer_stream, owed);
  return 0;
}

void connection::dirty() {
  if (dirty_ || closed_) return;
  dirty_ = true;
  w_.mark_dirty(shared_from_this());
}

void connection::consume(std::int32_t stream, std::size_t n) {
  if (closed_ || n == 0) return;
  nghttp2_session_consume_stream(session_, stream, n);  // the connection's went back on arrival
  dirty();
}

void connection::resume(std::int32_t stream) {
  if (closed_) return;
  nghttp2_session_resume_data(session_, stream);
  dirty();
}

void connection::reset(std::int32_t stream, std::uint32_t code) {
  if (closed_) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, code);
  dirty();
}

void connection::close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  closed_why_ = why;
  closed_peer_ = peer();
  asio::error_code ignored;
  raw_socket().close(ignored);
  on_closed(why);
}

void connection::start_reading() {
  alive_.on_read(std::chrono::steady_clock::now());
  read_more();
}

bool connection::keepalive_tick(steady_time now, bool has_calls, const char* peer_kind) {
  if (closed_) return false;
  switch (keepalive_step(alive_, keepalive_, now, has_calls)) {
    case keepalive_action::none: return true;
    case keepalive_action::ping:
      core::bump(keepalive_.toward_server ? core::global_metrics().keepalive_backend_pings_total
                                          : core::global_metrics().keepalive_client_pings_total);
      nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
      dirty();
      return true;
    case keepalive_action::close: break;
  }
  const bool backend = keepalive_.toward_server;
  core::bump(backend ? core::global_metrics().keepalive_backend_timeouts_total
                     : core::global_metrics().keepalive_client_timeouts_total);
  static core::log_throttle throttled[2];
  if (auto held = throttled[backend].pass(); held >= 0)
    net_log().warn("keepalive_timeout peer={} {}={} timeout_ms={} suppressed={}", peer(), peer_kind,
                   backend ? static_cast<upstream_connection*>(this)->address() : std::string("client"),
                   keepalive_.timeout.count(), held);
  close("no answer to a keepalive PING within " + secs(keepalive_.timeout) + " (keepalive.timeout_secs)");
  return false;
}

void connection::read_more() {
  if (closed_) return;
  auto self = shared_from_this();
  if (tls_) {
    tls_->async_read_some(asio::buffer(tls_buf_), [this, self](const asio::error_code& ec, std::size_t n) {
      if (ec) {
        close(ec == asio::error::eof ? "the peer closed the connection" : ec.message());
      } else {
        feed(tls_buf_.data(), n);
        read_more();
      }
      w_.check_budget();
      w_.flush_dirty();
    });
    return;
  }
  // Plain TCP: wait until readable, then read into the worker's chunk, so
  // an idle connection holds no buffer and DATA payloads are never copied.
  plain_->async_wait(asio::ip::tcp::socket::wait_read, [this, self](const asio::error_code& ec) {
    if (ec) {
      close(ec.message());
      w_.flush_dirty();
      return;
    }
    for (int round = 0; round < 4 && !closed_; ++round) {
      std::size_t free = 0;
      char* space = w_.read_space(free);
      asio::error_code rec;
      const std::size_t n = plain_->read_some(asio::buffer(space, free), rec);
      if (rec == asio::error::would_block || rec == asio::error::try_again) break;
      if (rec) {
        close(rec == asio::error::eof ? "the peer closed the connection" : rec.message());
        break;
      }
      reading_ = w_.read_chunk();
      feed(space, n);
      reading_ = nullptr;
      w_.read_done(n);
      if (n < free) break;  // drained for now
    }
    read_more();
    w_.check_budget();
    w_.flush_dirty();
  });
}

slice connection::slice_of(const std::uint8_t* data, std::size_t n) {
  const char* p = reinterpret_cast<const char*>(data);
  if (reading_ && p >= reading_->data() && p + n <= reading_->data() + reading_->capacity)
    return slice(reading_, static_cast<std::size_t>(p - reading_->data()), n);
  return slice::copy_of({p, n});
}

void connection::feed(const char* data, std::size_t n) {
  alive_.on_read(std::chrono::steady_clock::now());
  const auto rv = nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(data), n);
  if (rv < 0) return close(std::string("HTTP/2 error: ") + nghttp2_strerror(static_cast<int>(rv)));
  dirty();
}

void connection::flush() {
  dirty_ = false;
  if (closed_ || !session_) return;
  // Frame, write, repeat while the socket takes everything: a plaintext
  // write that completes needs no trip through the event loop.
  for (int round = 0; round < 16 && !closed_; ++round) {
    while (!(write_pending_ && filling_.bytes >= max_batch_bytes)) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return close(std::string("HTTP/2 error: ") + nghttp2_strerror(static_cast<int>(n)));
      if (n == 0) break;
      filling_.add_ctrl(data, static_cast<std::size_t>(n));
    }
    if (!writable_ || write_pending_ || filling_.bytes == 0) break;
    start_write();
  }
  if (!closed_ && !write_pending_ && filling_.bytes == 0 && !nghttp2_session_want_read(session_) &&
      !nghttp2_session_want_write(session_))
    close("the HTTP/2 session ended");
}

void connection::start_write() {
  std::swap(filling_, writing_);
  write_pending_ = true;
  iov_.clear();
  iov_.reserve(writing_.pieces.size());
  for (const auto& p : writing_.pieces) {
    if (!p.bytes.empty())
      iov_.push_back({const_cast<char*>(p.bytes.data()), p.bytes.size()});
    else
      iov_.push_back({writing_.ctrl.data() + p.ctrl_off, p.ctrl_len});
  }
  iov_at_ = 0;
  if (!tls_) return write_plain();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(iov_.size());
  for (const auto& v : iov_) buffers.emplace_back(v.iov_base, v.iov_len);
  // asio's transfer_all would hand the kernel at most 64 KiB per call.
  auto whole = [](const asio::error_code& ec, std::size_t) -> std::size_t { return ec ? 0 : max_batch_bytes * 4; };
  asio::async_write(*tls_, buffers, whole, [this, self = shared_from_this()](const asio::error_code& ec, std::size_t) {
    if (ec) {
      close(ec.message());
    } else {
      write_done();
      flush();
    }
    w_.flush_dirty();
  });
}

void connection::write_plain() {
  const int fd = plain_->native_handle();
  while (iov_at_ < iov_.size()) {
    msghdr msg{};
    msg.msg_iov = &iov_[iov_at_];
    msg.msg_iovlen = std::min<std::size_t>(iov_.size() - iov_at_, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Full: wait for room (the only write that goes through the loop).
        plain_->async_wait(asio::ip::tcp::socket::wait_write,
                           [this, self = shared_from_this()](const asio::error_code& ec) {
                             if (ec) {
                               close(ec.message());
                             } else {
                               write_plain();
                               if (!write_pending_) flush();
                             }
                             w_.flush_dirty();
                           });
        return;
      }
      return close(std::string("write: ") + std::strerror(errno));
    }
    // Skip what went out; a partly written piece keeps its rest.
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && left >= iov_[iov_at_].iov_len) left -= iov_[iov_at_++].iov_len;
    if (left > 0) {
      iov_[iov_at_].iov_base = static_cast<char*>(iov_[iov_at_].iov_base) + left;
      iov_[iov_at_].iov_len -= left;
    }
  }
  write_done();
}

void connection::write_done() {
  write_pending_ = false;
  writing_.clear();
}

// --- downstream: a client of scg -------------------------------------------------

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
    nghttp2_session_callbacks_set_on_begin_headers_callback(c, &on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(c, &on_frame_send);
    return c;
  }();
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_session_server_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, t.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, t.stream_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, t.max_header_bytes},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, t.max_frame},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, static_cast<std::int32_t>(t.connection_window));
}

void downstream_connection::start() {
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
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  dirty();
}

std::vector<std::shared_ptr<server_stream>> downstream_connection::calls() const {
  std::vector<std::shared_ptr<server_stream>> out;
  for (const auto& [id, c] : streams_) out.push_back(c);
  return out;
}

void downstream_connection::tick(steady_time now) {
  if (closed()) return;
  auto& m = core::global_metrics();
  if (!preface_done_) {
    if (now - born_ < tune_.handshake_timeout) return;
    core::bump(m.conn_handshake_timeouts_total);
    static core::log_throttle throttle;
    if (auto held = throttle.pass(); held >= 0)
      net_log().info("handshake_timeout peer={} timeout_ms={} suppressed={}", peer(), tune_.handshake_timeout.count(),
                     held);
    return close("no HTTP/2 preface within " + secs(tune_.handshake_timeout) + " (limits.handshake_timeout_secs)");
  }
  if (!keepalive_tick(now, !streams_.empty(), "client")) return;
  if (goaway_sent_) {
    if (now - *goaway_sent_ >= std::chrono::seconds(5)) close("idle: closed after its GOAWAY");
    return;
  }
  if (streams_.empty() && tune_.idle_timeout.count() > 0 && now - idle_since_ >= tune_.idle_timeout) {
    core::bump(m.conn_idle_closed_total);
    net_log().debug("idle_connection_closed peer={} idle_ms={}", peer(), tune_.idle_timeout.count());
    goaway_sent_ = now;
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);  // GOAWAY, then the session ends
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
    core::bump(core::global_metrics().conn_protocol_errors_total);
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
      nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0)
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
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

// --- upstream: scg's connection to a backend ----------------------------------------

upstream_connection::upstream_connection(worker& w, std::string address, std::chrono::milliseconds connect_timeout,
                                         const tuning& t)
    : connection(w, asio::ip::tcp::socket(w.io())),
      address_(std::move(address)),
      connect_timeout_(connect_timeout),
      resolver_(w.io()),
      timer_(w.io()) {
  static nghttp2_session_callbacks* cbs = [] {
    auto* c = base_callbacks();
    nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
    return c;
  }();
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, 1000);
  nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, t.stream_window},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, t.max_frame},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, static_cast<std::int32_t>(t.connection_window));
  keepalive_ = {t.keepalive_interval, t.keepalive_timeout, true};
  writable_ = false;
}

upstream_connection::~upstream_connection() = default;

void upstream_connection::connect() {
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
  if (writable_) keepalive_tick(now, !streams_.empty(), "backend");
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

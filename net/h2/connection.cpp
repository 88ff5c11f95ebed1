// The transport both kinds of connection share: the socket (plain or TLS),
// reading into the worker's chunks, batched zero-copy writes, and the nghttp2
// session plumbing of both sides (data sources, flow control, keepalive).
#include "net/h2/connection.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <spdlog/spdlog.h>

#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/h2/connection_helpers.hpp"
#include "net/h2/worker.hpp"
#include "net/net_stats.hpp"

namespace scg::net::h2 {

namespace {

/// Batches larger than this wait for the write in flight before taking more frames.
constexpr std::size_t max_batch_bytes = 1u << 20;

}  // namespace

namespace detail {

spdlog::logger& net_log() {
  static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  return *log;
}

std::string secs(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s" : std::to_string(d.count()) + " ms";
}

}  // namespace detail

using detail::net_log;
using detail::nv_of;
using detail::secs;

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
  if (nghttp2_session_callbacks_new(&cbs) != 0) return nullptr;
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
                                 std::uint32_t* flags, nghttp2_data_source* source, void* user) {
  auto* p = static_cast<pipe*>(source->ptr);
  const std::size_t n = std::min(length, p->data.bytes());
  if (n == 0 && !p->ended) return NGHTTP2_ERR_DEFERRED;
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == p->data.bytes() && p->ended) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (p->trailers) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      auto nv = nv_of(*p->trailers);
      // Without its trailers the stream would never end: the session fails instead.
      if (!static_cast<connection*>(user)->check(nghttp2_submit_trailer(session, stream, nv.data(), nv.size()),
                                                 "nghttp2_submit_trailer"))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
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
  // The connection's window went back on arrival.
  if (!check(nghttp2_session_consume_stream(session_, stream, n), "nghttp2_session_consume_stream")) return;
  dirty();
}

void connection::resume(std::int32_t stream) {
  if (closed_) return;
  // Only a fatal error counts: a stream with nothing deferred, or gone, is no failure.
  if (!check(nghttp2_session_resume_data(session_, stream), "nghttp2_session_resume_data")) return;
  dirty();
}

void connection::reset(std::int32_t stream, std::uint32_t code) {
  if (closed_) return;
  if (!check(nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, code), "nghttp2_submit_rst_stream")) return;
  dirty();
}

bool connection::check(int rv, const char* call) {
  if (!nghttp2_is_fatal(rv)) return true;
  close(std::string("nghttp2 failed: ") + call + ": " + nghttp2_strerror(rv));
  return false;
}

void connection::open_session(bool server, const nghttp2_session_callbacks* cbs, std::uint32_t peer_max_streams,
                              const nghttp2_settings_entry* settings, std::size_t n, std::uint32_t connection_window) {
  nghttp2_option* opt = nullptr;
  if (!cbs || nghttp2_option_new(&opt) != 0) {
    broken_ = "nghttp2 failed: cannot allocate the HTTP/2 session's callbacks or options";
    return;
  }
  nghttp2_option_set_no_auto_window_update(opt, 1);
  if (peer_max_streams > 0) nghttp2_option_set_peer_max_concurrent_streams(opt, peer_max_streams);
  const int rv = server ? nghttp2_session_server_new2(&session_, cbs, this, opt)
                        : nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  if (rv != 0) {
    session_ = nullptr;
    broken_ = std::string("nghttp2 failed: nghttp2_session_") + (server ? "server" : "client") +
              "_new2: " + nghttp2_strerror(rv);
    return;
  }
  if (int e = nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, n); e != 0)
    broken_ = std::string("nghttp2 failed: nghttp2_submit_settings: ") + nghttp2_strerror(e);
  else if (int w = nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                                         static_cast<std::int32_t>(connection_window));
           w != 0)
    broken_ = std::string("nghttp2 failed: nghttp2_session_set_local_window_size: ") + nghttp2_strerror(w);
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

bool connection::keepalive_tick(steady_time now, bool has_calls, const char* peer_kind, std::string_view peer_name) {
  if (closed_) return false;
  switch (keepalive_step(alive_, keepalive_, now, has_calls)) {
    case keepalive_action::none: return true;
    case keepalive_action::ping:
      core::bump(keepalive_.toward_server ? global_net_stats().keepalive_backend_pings_total
                                          : global_net_stats().keepalive_client_pings_total);
      if (!check(nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr), "nghttp2_submit_ping")) return false;
      dirty();
      return true;
    case keepalive_action::close: break;
  }
  const bool backend = keepalive_.toward_server;
  core::bump(backend ? global_net_stats().keepalive_backend_timeouts_total
                     : global_net_stats().keepalive_client_timeouts_total);
  static core::log_throttle throttled[2];
  if (auto held = throttled[backend].pass(); held >= 0)
    net_log().warn("keepalive_timeout peer={} {}={} timeout_ms={} suppressed={}", peer(), peer_kind, peer_name,
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

}  // namespace scg::net::h2

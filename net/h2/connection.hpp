#pragma once
// HTTP/2 connections of the data plane: nghttp2 sessions on asio sockets,
// each owned by one worker thread. A downstream connection is a client of
// scg (scg is its server); an upstream connection goes to one backend (scg is
// its client) and multiplexes every call this worker sends there. This
// header declares what both share: the transport (connection.cpp), the pipes
// and the stream events; endpoints.hpp declares the two sides
// (downstream_connection.cpp, upstream_connection.cpp).
//
// Flow control is end to end per stream, and never shared: a connection
// gives its peer the connection window back as soon as DATA arrives (the
// bytes are then in their stream's bounded queue), and a stream's window
// only once the bytes were framed onto the other connection (the sending
// side's pipe calls consume on the receiving side). So a slow reader slows
// its own producer, holds at most its stream window in scg, and never
// holds back the other streams of a connection (docs/architecture.md, the
// memory bound).

#include <nghttp2/nghttp2.h>
#include <sys/uio.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/h2/bytes.hpp"
#include "net/h2/keepalive.hpp"

namespace scg::net::h2 {

class worker;
class connection;

struct header {
  std::string name, value;
};
using header_list = std::vector<header>;
/// A header field by reference: the strings outlive the call that submits it.
struct header_ref {
  std::string_view name, value;
};

/// Bytes flowing one way through a forwarded call: received on one
/// connection, not yet framed on the other.
struct pipe {
  slice_queue data;
  bool ended = false;                  ///< no more data will be pushed
  std::optional<header_list> trailers;  ///< sent after the data (responses only)
  /// Where the bytes came from: told when they leave (flow control).
  std::weak_ptr<connection> producer;
  std::int32_t producer_stream = 0;

  /// Queues `s`; `owed`: the producer's window gets its bytes back when they
  /// are framed (false for bytes already given back, or made by scg).
  void push(slice s, bool owed) { data.push(std::move(s), owed); }
  /// Drops what is queued and gives the producer back what it was owed.
  void drop();
};

/// The events of a forwarded call on its client-facing stream.
class server_stream {
 public:
  virtual ~server_stream() = default;
  virtual void on_request_header(std::string_view name, std::string_view value) = 0;
  virtual void on_request_headers_done() = 0;
  /// The header block grew past `limit` bytes (max_header_bytes): the rest of
  /// it is dropped, and the call answers when the block ends.
  virtual void on_request_headers_too_large(std::size_t limit) = 0;
  virtual void on_request_data(slice s) = 0;
  virtual void on_request_end() = 0;
  /// The stream closed; error_code is the HTTP/2 code (0: a clean end).
  virtual void on_server_stream_closed(std::uint32_t error_code) = 0;

  // --- the worker's housekeeping (bounded memory, slow clients)
  /// Bytes of call data the call holds in scg (queued either way, held messages).
  virtual std::size_t held_bytes() const = 0;
  /// Copies what it holds out of shared read buffers; the bytes copied.
  virtual std::size_t compact() = 0;
  /// Ends the call with RESOURCE_EXHAUSTED `why`: the worker's buffer budget is spent.
  virtual void shed(const std::string& why) = 0;
  /// The worker's tick (twice a second): the call checks its own timeouts.
  virtual void tick(steady_time now) = 0;
};

/// The events of a forwarded call on its backend stream.
class client_stream {
 public:
  virtual ~client_stream() = default;
  virtual void on_response_header(std::string_view name, std::string_view value, bool trailer) = 0;
  virtual void on_response_headers_done(bool trailer, bool end_stream) = 0;
  virtual void on_response_data(slice s) = 0;
  /// The stream closed; `error_code` is the HTTP/2 code, `why` says what
  /// happened to the connection when it took the stream with it.
  virtual void on_client_stream_closed(std::uint32_t error_code, const std::string& why) = 0;
};

/// The socket and the nghttp2 session of one connection.
class connection : public std::enable_shared_from_this<connection> {
 public:
  using tls_socket = asio::ssl::stream<asio::ip::tcp::socket>;

  connection(worker& w, asio::ip::tcp::socket s);
  connection(worker& w, std::unique_ptr<tls_socket> s);
  virtual ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  worker& owner() { return w_; }
  bool closed() const { return closed_; }

  /// Frames what nghttp2 has to send and starts a write (the worker calls it
  /// for every connection marked dirty, once per event-loop turn).
  void flush();
  /// Asks the worker to flush this connection before it waits again.
  void dirty();
  /// The peer may send `n` more bytes on `stream` (and on the connection).
  void consume(std::int32_t stream, std::size_t n);
  /// Resumes a deferred data source of `stream` (its pipe got bytes or ended).
  void resume(std::int32_t stream);
  /// Resets `stream` with HTTP/2 error `code`.
  void reset(std::int32_t stream, std::uint32_t code);
  /// Closes the socket now; open streams close with `why`.
  void close(const std::string& why);
  /// False, with the connection closed, when `rv` (what nghttp2's `call`
  /// returned) is a fatal error: out of memory, or a session that cannot go
  /// on. Other errors (a stream already gone) are the caller's to ignore.
  bool check(int rv, const char* call);
  /// Makes the nghttp2 session, server or client side, with `cbs` and
  /// window updates left to scg, then sends `settings` and widens the
  /// connection window to `connection_window`; `peer_max_streams` (client
  /// side, 0: nghttp2's default) bounds streams before the peer's SETTINGS.
  /// A failure (out of memory) leaves broken_ set, for start/connect to close.
  void open_session(bool server, const nghttp2_session_callbacks* cbs, std::uint32_t peer_max_streams,
                    const nghttp2_settings_entry* settings, std::size_t n, std::uint32_t connection_window);
  /// The worker's tick: keepalive and the connection's own timeouts.
  virtual void tick(steady_time now) = 0;

  /// An nghttp2 data source reading `p`: DATA frames carry its slices
  /// without copying them, and the trailers follow its last byte.
  nghttp2_data_provider provider(pipe& p);

  /// "ipv4:127.0.0.1:5000", as gRPC names peers.
  std::string peer() const;
  /// peer() as it was when the connection closed (the socket is gone after).
  const std::string& closed_peer() const { return closed_peer_; }

  /// `n` received bytes at `data` as a slice: shared with the read buffer
  /// while nghttp2 parses it, else a copy (TLS).
  slice slice_of(const std::uint8_t* data, std::size_t n);

 protected:
  /// Starts reading (after the session exists and, for TLS, the handshake).
  void start_reading();
  /// Every open stream learns that the connection is gone.
  virtual void on_closed(const std::string& why) = 0;
  /// Shared nghttp2 callbacks, subclasses add theirs; null when nghttp2
  /// could not allocate them.
  static nghttp2_session_callbacks* base_callbacks();
  asio::ip::tcp::socket& raw_socket();
  /// Sends a PING or closes the connection as keepalive says; false once closed.
  /// `peer_kind` and `peer_name` name the peer in the log line ("backend", its address).
  bool keepalive_tick(steady_time now, bool has_calls, const char* peer_kind, std::string_view peer_name);

  worker& w_;
  nghttp2_session* session_ = nullptr;
  /// Why the session could not be set up ("" when it was): the connection
  /// closes with it as it starts, before session_ is used.
  std::string broken_;
  bool writable_ = true;  // false while an upstream connection is still connecting
  std::string closed_why_;
  std::string closed_peer_;  // peer() as it was before the socket closed
  keepalive_policy keepalive_;
  keepalive_state alive_;

 private:
  struct piece {
    slice bytes;              // DATA payload, shared with the reading side
    std::size_t ctrl_off = 0;  // otherwise bytes in ctrl at [ctrl_off, +ctrl_len)
    std::size_t ctrl_len = 0;
  };
  struct batch {
    std::string ctrl;
    std::vector<piece> pieces;
    std::size_t bytes = 0;
    void add_ctrl(const std::uint8_t* p, std::size_t n);
    void add_slice(slice s);
    void clear() {
      ctrl.clear();
      pieces.clear();
      bytes = 0;
    }
  };
  static int on_send_data(nghttp2_session*, nghttp2_frame* frame, const std::uint8_t* framehd, std::size_t length,
                          nghttp2_data_source* source, void* user);
  static ssize_t on_read_data(nghttp2_session*, std::int32_t stream, std::uint8_t* buf, std::size_t length,
                              std::uint32_t* flags, nghttp2_data_source* source, void* user);
  void read_more();
  void feed(const char* data, std::size_t n);
  void start_write();
  void write_plain();
  void write_done();

  std::optional<asio::ip::tcp::socket> plain_;
  std::unique_ptr<tls_socket> tls_;
  std::vector<char> tls_buf_;
  chunk* reading_ = nullptr;  // the worker's chunk while nghttp2 parses it
  batch filling_, writing_;
  bool write_pending_ = false;
  std::vector<iovec> iov_;  // the batch being written, from iov_at_ on
  std::size_t iov_at_ = 0;
  bool closed_ = false;
  bool dirty_ = false;
  friend class worker;
};

}  // namespace scg::net::h2

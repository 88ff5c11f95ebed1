#pragma once
// The two kinds of data-plane connection: downstream (a client of scg; scg is
// the HTTP/2 server) and upstream (scg's connection to a backend; scg is the
// HTTP/2 client).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "net/h2/connection.hpp"

namespace scg::net::h2 {

/// HTTP/2 settings of both kinds of connection.
struct tuning {
  std::uint32_t stream_window = 4u << 20;      ///< per stream, each way (4 MiB: a 4 MiB message in flight)
  std::uint32_t connection_window = 16u << 20;  ///< per connection
  std::uint32_t max_concurrent_streams = 1000;  ///< streams a client may open at once
  std::uint32_t max_header_bytes = 64u << 10;   ///< a request's header block
  /// The largest DATA frame peers may send: large frames cut per-frame work
  /// on both ends of a stream (bytes still arrive as they come).
  std::uint32_t max_frame = 1u << 20;

  // --- timeouts (config: limits.*, keepalive.*; docs/hardening.md)
  std::chrono::milliseconds handshake_timeout{10000};  ///< accept to the client's HTTP/2 preface
  std::chrono::milliseconds idle_timeout{300000};      ///< a client connection without streams (0: never)
  std::chrono::milliseconds first_message_timeout{30000};  ///< a request's first message (0: never)
  std::chrono::milliseconds keepalive_interval{10000};  ///< PING after this long quiet (0: never)
  std::chrono::milliseconds keepalive_timeout{8000};    ///< an unanswered PING closes the connection
  /// Call data one worker may hold (limits.buffer_mib / workers).
  std::int64_t worker_buffer_bytes = std::int64_t{256} << 20;
  /// Client connections open, all workers (the front door's count); may be null.
  std::atomic<std::uint64_t>* client_connections = nullptr;
};

class downstream_connection final : public connection {
 public:
  /// Makes the call for a new request stream.
  using call_factory = std::function<std::shared_ptr<server_stream>(downstream_connection&, std::int32_t stream)>;

  downstream_connection(worker& w, asio::ip::tcp::socket s, const call_factory& make, const tuning& t);
  downstream_connection(worker& w, std::unique_ptr<tls_socket> s, const call_factory& make, const tuning& t);
  ~downstream_connection() override;

  /// Sends the server preface and starts reading.
  void start();
  /// Answers `stream`: `headers`, then `body` (its data, then its trailers);
  /// without a body the headers end the stream (a trailers-only answer).
  bool submit_response(std::int32_t stream, const header_list& headers, pipe* body);
  /// Tells the client to open no new streams; the open ones carry on.
  void go_away();
  std::size_t open_streams() const { return streams_.size(); }
  /// Every open call, for cancelling at the shutdown deadline.
  std::vector<std::shared_ptr<server_stream>> calls() const;
  /// The call on `stream`, or null.
  server_stream* find(std::int32_t stream);
  /// True once the client's HTTP/2 preface (its first SETTINGS) arrived.
  bool preface_done() const { return preface_done_; }
  void tick(steady_time now) override;

 private:
  void init(const tuning& t);
  void on_closed(const std::string& why) override;
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t flags, void* user);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_data_chunk(nghttp2_session*, std::uint8_t flags, std::int32_t stream, const std::uint8_t* data,
                           std::size_t len, void* user);
  static int on_stream_close(nghttp2_session*, std::int32_t stream, std::uint32_t error_code, void* user);

  call_factory make_;
  std::unordered_map<std::int32_t, std::shared_ptr<server_stream>> streams_;
  std::size_t header_bytes_ = 0;  // of the header block being received (blocks never interleave)
  const tuning& tune_;
  const steady_time born_ = std::chrono::steady_clock::now();
  steady_time idle_since_ = born_;  // when its last stream closed (or it opened)
  bool preface_done_ = false;
  std::optional<steady_time> goaway_sent_;  // idle: told to go away, closed soon after
  std::string protocol_error_;  // the GOAWAY nghttp2 sent for the client's HTTP/2 error ("" when none)
};

class upstream_connection final : public connection {
 public:
  upstream_connection(worker& w, std::string address, std::chrono::milliseconds connect_timeout, const tuning& t);
  ~upstream_connection() override;

  /// Resolves and connects; streams submitted meanwhile wait for it.
  void connect();
  /// Opens a stream carrying `headers` and `body`; its events go to `call`.
  /// The stream id, or a negative nghttp2 error.
  std::int32_t submit_request(const std::vector<header_ref>& headers, pipe& body, std::shared_ptr<client_stream> call);
  /// False once the connection failed, closed or was told to go away: new
  /// calls then get a new connection.
  bool usable() const { return !closed() && !going_away_; }
  const std::string& address() const { return address_; }
  /// The call on `stream`, or null.
  client_stream* find(std::int32_t stream);
  void tick(steady_time now) override;

 private:
  void on_closed(const std::string& why) override;
  void connected();
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t flags, void* user);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_data_chunk(nghttp2_session*, std::uint8_t flags, std::int32_t stream, const std::uint8_t* data,
                           std::size_t len, void* user);
  static int on_stream_close(nghttp2_session*, std::int32_t stream, std::uint32_t error_code, void* user);

  std::string address_;
  std::chrono::milliseconds connect_timeout_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  bool going_away_ = false;
  std::unordered_map<std::int32_t, std::shared_ptr<client_stream>> streams_;
};

}  // namespace scg::net::h2

#pragma once
// A tiny raw HTTP/2 client for hostile-client tests and the benchmark: one
// blocking TCP socket to 127.0.0.1:PORT, frames built by hand (RFC 9113 §6),
// request headers encoded as HPACK literals without indexing and without
// Huffman (RFC 7541 §6.2.2), so every byte on the wire is the caller's choice.
// It can misbehave in ways real clients never do: never read, never end a
// header block, reset every stream it opens. Depends only on POSIX sockets
// and the C++ standard library.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace scg::test::raw_h2 {

/// Frame types (RFC 9113 §6).
enum class frame_type : std::uint8_t {
  data = 0x0,
  headers = 0x1,
  priority = 0x2,
  rst_stream = 0x3,
  settings = 0x4,
  push_promise = 0x5,
  ping = 0x6,
  goaway = 0x7,
  window_update = 0x8,
  continuation = 0x9,
};

/// Frame flags; ack shares its bit with end_stream.
namespace flags {
constexpr std::uint8_t none = 0x0;
constexpr std::uint8_t end_stream = 0x1;
constexpr std::uint8_t ack = 0x1;
constexpr std::uint8_t end_headers = 0x4;
}  // namespace flags

/// Error codes (RFC 9113 §7).
enum error_code : std::uint32_t {
  no_error = 0x0,
  protocol_error = 0x1,
  internal_error = 0x2,
  flow_control_error = 0x3,
  stream_closed = 0x5,
  frame_size_error = 0x6,
  refused_stream = 0x7,
  cancel = 0x8,
  compression_error = 0x9,
  enhance_your_calm = 0xb,
};

/// SETTINGS identifiers (RFC 9113 §6.5.2).
enum setting : std::uint16_t {
  header_table_size = 0x1,
  enable_push = 0x2,
  max_concurrent_streams = 0x3,
  initial_window_size = 0x4,
  max_frame_size = 0x5,
  max_header_list_size = 0x6,
};

/// The client connection preface (RFC 9113 §3.4), sent before the first SETTINGS.
constexpr std::string_view client_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// ------------------------------------------------------------------ framing

inline void put_u16(std::string& out, std::uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}

inline void put_u32(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v >> 24);
  out += static_cast<char>(v >> 16);
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}

inline std::uint32_t get_u32(std::string_view in, std::size_t at) {
  return std::uint32_t(std::uint8_t(in[at])) << 24 | std::uint32_t(std::uint8_t(in[at + 1])) << 16 |
         std::uint32_t(std::uint8_t(in[at + 2])) << 8 | std::uint32_t(std::uint8_t(in[at + 3]));
}

/// One frame: the 9-byte header (24-bit length, type, flags, 31-bit stream
/// id), then `payload`, which must be shorter than 16 MiB.
inline std::string frame(frame_type type, std::uint8_t flag_bits, std::uint32_t stream, std::string_view payload) {
  std::string out;
  out.reserve(9 + payload.size());
  const auto n = static_cast<std::uint32_t>(payload.size());
  out += static_cast<char>(n >> 16);
  out += static_cast<char>(n >> 8);
  out += static_cast<char>(n);
  out += static_cast<char>(type);
  out += static_cast<char>(flag_bits);
  put_u32(out, stream & 0x7fffffffu);
  out.append(payload);
  return out;
}

/// SETTINGS with `entries` (id, value); the client's first frame after the preface.
inline std::string settings_frame(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries = {}) {
  std::string payload;
  for (const auto& [id, value] : entries) {
    put_u16(payload, id);
    put_u32(payload, value);
  }
  return frame(frame_type::settings, flags::none, 0, payload);
}

inline std::string settings_ack_frame() { return frame(frame_type::settings, flags::ack, 0, {}); }

/// HEADERS carrying `block` (HPACK bytes); without END_HEADERS, CONTINUATION
/// frames must follow.
inline std::string headers_frame(std::uint32_t stream, std::string_view block, bool end_headers, bool end_stream) {
  const std::uint8_t f = (end_headers ? flags::end_headers : 0) | (end_stream ? flags::end_stream : 0);
  return frame(frame_type::headers, f, stream, block);
}

inline std::string continuation_frame(std::uint32_t stream, std::string_view block, bool end_headers) {
  return frame(frame_type::continuation, end_headers ? flags::end_headers : flags::none, stream, block);
}

inline std::string data_frame(std::uint32_t stream, std::string_view payload, bool end_stream) {
  return frame(frame_type::data, end_stream ? flags::end_stream : flags::none, stream, payload);
}

inline std::string rst_stream_frame(std::uint32_t stream, std::uint32_t code) {
  std::string payload;
  put_u32(payload, code);
  return frame(frame_type::rst_stream, flags::none, stream, payload);
}

/// PING with 8 opaque bytes made from `opaque`.
inline std::string ping_frame(std::uint64_t opaque, bool ack = false) {
  std::string payload;
  put_u32(payload, static_cast<std::uint32_t>(opaque >> 32));
  put_u32(payload, static_cast<std::uint32_t>(opaque));
  return frame(frame_type::ping, ack ? flags::ack : flags::none, 0, payload);
}

/// WINDOW_UPDATE of `increment` (1 .. 2^31-1) for `stream` (0: the connection).
inline std::string window_update_frame(std::uint32_t stream, std::uint32_t increment) {
  std::string payload;
  put_u32(payload, increment & 0x7fffffffu);
  return frame(frame_type::window_update, flags::none, stream, payload);
}

inline std::string goaway_frame(std::uint32_t last_stream, std::uint32_t code) {
  std::string payload;
  put_u32(payload, last_stream & 0x7fffffffu);
  put_u32(payload, code);
  return frame(frame_type::goaway, flags::none, 0, payload);
}

// -------------------------------------------------------------------- HPACK

/// An HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the
/// bits above the prefix.
inline void hpack_integer(std::string& out, std::uint64_t value, int prefix_bits, std::uint8_t first = 0) {
  const std::uint64_t max_prefix = (1u << prefix_bits) - 1;
  if (value < max_prefix) {
    out += static_cast<char>(first | value);
    return;
  }
  out += static_cast<char>(first | max_prefix);
  value -= max_prefix;
  while (value >= 128) {
    out += static_cast<char>(0x80 | (value & 0x7f));
    value >>= 7;
  }
  out += static_cast<char>(value);
}

/// Appends one "literal header field without indexing, new name" (0x00, then
/// name and value as 7-bit-prefixed lengths and raw octets, no Huffman). The
/// server's dynamic table never changes, so blocks can be built in any order.
inline void hpack_literal(std::string& block, std::string_view name, std::string_view value) {
  block += '\0';
  hpack_integer(block, name.size(), 7);
  block.append(name);
  hpack_integer(block, value.size(), 7);
  block.append(value);
}

/// The header block of a gRPC request for `path`, then `extra` headers
/// (lower-case names, e.g. "grpc-timeout", "x-fake-responses").
inline std::string grpc_request_block(std::string_view path,
                                      const std::vector<std::pair<std::string, std::string>>& extra = {},
                                      std::string_view authority = "127.0.0.1") {
  std::string block;
  hpack_literal(block, ":method", "POST");
  hpack_literal(block, ":scheme", "http");
  hpack_literal(block, ":path", path);
  hpack_literal(block, ":authority", authority);
  hpack_literal(block, "content-type", "application/grpc");
  hpack_literal(block, "te", "trailers");
  for (const auto& [name, value] : extra) hpack_literal(block, name, value);
  return block;
}

/// A gRPC length-prefixed message: the compressed flag, the big-endian
/// length, the bytes (gRPC over HTTP/2, "Length-Prefixed-Message").
inline std::string grpc_message(std::string_view body, bool compressed = false) {
  std::string out;
  out.reserve(5 + body.size());
  out += static_cast<char>(compressed ? 1 : 0);
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out.append(body);
  return out;
}

// --------------------------------------------------------------- connection

/// A frame read back from the server.
struct frame_in {
  frame_type type = frame_type::data;
  std::uint8_t flag_bits = 0;
  std::uint32_t stream = 0;
  std::string payload;

  /// The error code of a RST_STREAM or GOAWAY.
  std::uint32_t error() const {
    if (type == frame_type::rst_stream && payload.size() >= 4) return get_u32(payload, 0);
    if (type == frame_type::goaway && payload.size() >= 8) return get_u32(payload, 4);
    return 0;
  }
  /// The last stream id of a GOAWAY.
  std::uint32_t last_stream() const {
    return type == frame_type::goaway && payload.size() >= 4 ? get_u32(payload, 0) & 0x7fffffffu : 0;
  }
};

/// One client connection over a blocking socket. Sends block (bounded by a
/// send time-out); reads are explicit, so a caller that never reads is a
/// client that never reads. Closed at destruction.
class connection {
 public:
  using clock = std::chrono::steady_clock;

  /// Connects to 127.0.0.1:`port` within `timeout` (sends then time out
  /// after it too: set_send_timeout); check ok().
  explicit connection(int port, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Non-blocking connect, so a listener that never accepts cannot hang us.
    const int fl = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
    int rc = ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd_, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      rc = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
                   ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0
               ? 0
               : -1;
    }
    ::fcntl(fd_, F_SETFL, fl);
    if (rc != 0) {
      close();
      return;
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_send_timeout(timeout);
  }
  /// An already connected stream socket to take over (one end of a
  /// socketpair, say); closed at destruction like any other.
  struct adopt_fd {
    int fd;
  };
  explicit connection(adopt_fd s, std::chrono::milliseconds timeout = std::chrono::seconds(5)) : fd_(s.fd) {
    set_send_timeout(timeout);
  }
  ~connection() { close(); }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  connection(connection&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        in_(std::move(other.in_)),
        at_(other.at_),
        eof_(other.eof_),
        server_settings_(std::move(other.server_settings_)) {}

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  /// True once a read saw the server close (EOF or a reset).
  bool peer_closed() const { return eof_; }

  /// A send that cannot complete within `t` fails (the peer stopped reading).
  void set_send_timeout(std::chrono::milliseconds t) {
    if (fd_ < 0) return;
    timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>(t.count() % 1000 * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  /// Sends every byte; false when the socket failed or the send timed out
  /// (never SIGPIPE).
  bool send(std::string_view bytes) {
    while (fd_ >= 0 && !bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return fd_ >= 0;
  }

  /// The preface and a SETTINGS frame with `entries`.
  bool send_preface(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries = {}) {
    return send(std::string(client_preface) + settings_frame(entries));
  }

  /// Preface, then waits up to `timeout` for the server's SETTINGS and acks
  /// it, so the server's own settings (stream limits, frame size) apply to
  /// what follows. False when no SETTINGS came.
  bool handshake(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries = {},
                 std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (!send_preface(entries)) return false;
    const auto until = clock::now() + timeout;
    while (auto f = read_frame(until - clock::now())) {
      if (f->type == frame_type::settings && !(f->flag_bits & flags::ack)) {
        server_settings_ = f->payload;
        return send(settings_ack_frame());
      }
    }
    return false;
  }

  /// A value from the server's SETTINGS (after handshake), if it sent it.
  std::optional<std::uint32_t> server_setting(std::uint16_t id) const {
    for (std::size_t at = 0; at + 6 <= server_settings_.size(); at += 6)
      if ((std::uint16_t(std::uint8_t(server_settings_[at])) << 8 | std::uint8_t(server_settings_[at + 1])) == id)
        return get_u32(server_settings_, at + 2);
    return std::nullopt;
  }

  /// Reads whatever has arrived, without blocking, and discards it (or, with
  /// `keep`, appends its whole frames there); the bytes read. Sets
  /// peer_closed() on EOF or a reset. Frames stay aligned: read_frame may follow.
  std::size_t drain(std::vector<frame_in>* keep = nullptr) {
    std::size_t total = 0;
    char buf[65536];
    while (fd_ >= 0 && !eof_) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        total += static_cast<std::size_t>(n);
        in_.append(buf, static_cast<std::size_t>(n));
        while (auto f = parse())
          if (keep) keep->push_back(std::move(*f));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof_ = true;
      break;
    }
    return total;
  }

  /// The next frame, waiting up to `timeout`; nullopt on time-out or once the
  /// server closed (see peer_closed()).
  template <class Rep, class Period>
  std::optional<frame_in> read_frame(std::chrono::duration<Rep, Period> timeout) {
    const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(timeout);
    for (;;) {
      if (auto f = parse()) return f;
      if (fd_ < 0 || eof_) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
      if (left < 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof_ = true;
        continue;  // a frame may still be whole in the buffer
      }
      in_.append(buf, static_cast<std::size_t>(n));
    }
  }

  /// Reads frames until one of `type` (on `stream`, when given) arrives,
  /// discarding the others; nullopt on time-out or close.
  template <class Rep, class Period>
  std::optional<frame_in> read_until(frame_type type, std::chrono::duration<Rep, Period> timeout,
                                     std::optional<std::uint32_t> stream = std::nullopt) {
    const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(timeout);
    while (auto f = read_frame(until - clock::now()))
      if (f->type == type && (!stream || f->stream == *stream)) return f;
    return std::nullopt;
  }

  /// Reads until the server closes the connection or `timeout` passes,
  /// keeping the frames; true when it closed.
  template <class Rep, class Period>
  bool wait_closed(std::chrono::duration<Rep, Period> timeout, std::vector<frame_in>* frames = nullptr) {
    const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(timeout);
    while (!eof_ && clock::now() < until) {
      auto f = read_frame(until - clock::now());
      if (f && frames) frames->push_back(std::move(*f));
    }
    return eof_;
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  /// One whole frame from the front of the buffer, if there is one.
  std::optional<frame_in> parse() {
    if (in_.size() - at_ < 9) return std::nullopt;
    const std::string_view v(in_);
    const std::size_t len = std::size_t(std::uint8_t(v[at_])) << 16 | std::size_t(std::uint8_t(v[at_ + 1])) << 8 |
                            std::uint8_t(v[at_ + 2]);
    if (in_.size() - at_ < 9 + len) return std::nullopt;
    frame_in f;
    f.type = static_cast<frame_type>(v[at_ + 3]);
    f.flag_bits = static_cast<std::uint8_t>(v[at_ + 4]);
    f.stream = get_u32(v, at_ + 5) & 0x7fffffffu;
    f.payload.assign(v.substr(at_ + 9, len));
    at_ += 9 + len;
    if (at_ == in_.size()) {
      in_.clear();
      at_ = 0;
    } else if (at_ > (1u << 20)) {  // compact now and then, not on every frame
      in_.erase(0, at_);
      at_ = 0;
    }
    return f;
  }

  int fd_ = -1;
  std::string in_;  ///< bytes read, not parsed yet from at_ on
  std::size_t at_ = 0;
  bool eof_ = false;
  std::string server_settings_;
};

}  // namespace scg::test::raw_h2

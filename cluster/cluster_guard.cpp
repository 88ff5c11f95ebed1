#include "cluster/cluster_guard.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <asio.hpp>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "cluster/cluster_stats.hpp"
#include "cluster/frame_check.hpp"
#include "core/metrics.hpp"
#include "core/listen_endpoint.hpp"

namespace scg::cluster {

namespace {

using asio::ip::tcp;

/// Connections relayed at once, at most: a cluster's replicas hold one or two
/// each to every peer; more is a flood, and the next ones are closed at once.
constexpr std::size_t max_links = 256;

/// Connections from one address still waiting for their handshake, at most:
/// a replica's handshake follows its connect at once, so a source holding
/// more is a flood (or a scan), and it cannot take every link from the others.
constexpr std::size_t max_awaiting_per_source = 8;

/// "address:port", for the log.
std::string peer_of(const tcp::endpoint& ep) { return ep.address().to_string() + ":" + std::to_string(ep.port()); }

}  // namespace

struct cluster_guard::impl {
  // Before io: the links its pending handlers hold count down at its end.
  std::size_t links = 0;
  std::map<asio::ip::address, std::size_t> awaiting;  // links before their handshake, by source
  std::chrono::milliseconds handshake_timeout{1000};
  std::chrono::steady_clock::time_point last_log{};
  tcp::endpoint inner;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer pause{io};
  std::thread thread;

  /// Counts a refused connection and logs it, at most once a second (a
  /// flood would otherwise fill the log).
  void refused(const std::string& peer, const std::string& reason) {
    core::bump(global_cluster_stats().cluster_connections_refused_total);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log < std::chrono::seconds(1)) return;
    last_log = now;
    spdlog::get("cluster")->warn("cluster_connection_refused peer={} reason=\"{}\"", peer, reason);
  }

  void accept();
  void admit(tcp::socket s);
};

namespace {

/// One connection: the dialer's (outer) and the one to CAF (inner).
struct link : std::enable_shared_from_this<link> {
  link(cluster_guard::impl& g, tcp::socket s, const tcp::endpoint& from)
      : guard(g), outer(std::move(s)), inner(g.io), source(from.address()), peer(peer_of(from)) {
    ++guard.links;
    ++guard.awaiting[source];
  }
  ~link() {
    --guard.links;
    handshake_over();
  }

  /// No longer counted as awaiting its handshake (it came, or the link ended).
  void handshake_over() {
    if (!awaiting_handshake) return;
    awaiting_handshake = false;
    if (auto i = guard.awaiting.find(source); i != guard.awaiting.end() && --i->second == 0) guard.awaiting.erase(i);
  }

  /// Reads the dialer's handshake before CAF hears of the connection: a
  /// probe or a scan that closes at once, or a dialer that never sends a
  /// handshake, never reaches CAF (see the header).
  void start() {
    deadline.expires_after(guard.handshake_timeout);
    deadline.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec || !self->awaiting_handshake) return;
      self->guard.refused(self->peer, "no handshake within " + std::to_string(self->guard.handshake_timeout.count()) +
                                          " ms");
      self->close();
    });
    read_handshake();
  }

  void read_handshake() {
    outer.async_read_some(asio::buffer(up), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (ec) return self->close();  // gone before its handshake: CAF never saw it
      if (auto why = self->check.feed(self->up.data(), n); !why.empty()) {
        self->guard.refused(self->peer, why);
        return self->close();
      }
      self->first.insert(self->first.end(), self->up.begin(), self->up.begin() + static_cast<std::ptrdiff_t>(n));
      if (!self->check.handshake_done()) return self->read_handshake();
      self->handshake_over();
      self->deadline.cancel();
      self->inner.async_connect(self->guard.inner, [self](const asio::error_code& cec) {
        if (cec) return self->close();
        asio::error_code ignored;
        self->outer.set_option(tcp::no_delay(true), ignored);
        self->inner.set_option(tcp::no_delay(true), ignored);
        asio::async_write(self->inner, asio::buffer(self->first), [self](const asio::error_code& wec, std::size_t) {
          if (wec) return self->close();
          self->first = {};
          self->dialer_to_caf();
          self->caf_to_dialer();
        });
      });
    });
  }

  void dialer_to_caf() {
    outer.async_read_some(asio::buffer(up), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (ec) return self->close();
      if (auto why = self->check.feed(self->up.data(), n); !why.empty()) {
        self->guard.refused(self->peer, why);
        return self->close();
      }
      asio::async_write(self->inner, asio::buffer(self->up, n), [self](const asio::error_code& wec, std::size_t) {
        if (wec) return self->close();
        self->dialer_to_caf();
      });
    });
  }

  void caf_to_dialer() {
    inner.async_read_some(asio::buffer(down), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (ec) return self->close();
      asio::async_write(self->outer, asio::buffer(self->down, n), [self](const asio::error_code& wec, std::size_t) {
        if (wec) return self->close();
        self->caf_to_dialer();
      });
    });
  }

  void close() {
    asio::error_code ignored;
    outer.close(ignored);
    inner.close(ignored);
    deadline.cancel();
  }

  cluster_guard::impl& guard;
  tcp::socket outer, inner;
  asio::steady_timer deadline{guard.io};
  asio::ip::address source;
  std::string peer;                     // source:port, for the log
  bool awaiting_handshake = true;       // counted in guard.awaiting; once false, connected (or connecting) to CAF
  std::vector<unsigned char> first;     // what came before that (the handshake, and perhaps more)
  frame_check check;
  std::array<unsigned char, 64 * 1024> up{}, down{};
};

}  // namespace

void cluster_guard::impl::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {  // out of descriptors or memory: try again in a while, not in a loop
      pause.expires_after(std::chrono::milliseconds(100));
      pause.async_wait([this](const asio::error_code& wec) {
        if (!wec) accept();
      });
      return;
    }
    admit(std::move(s));
    accept();
  });
}

void cluster_guard::impl::admit(tcp::socket s) {
  asio::error_code ec;
  const auto from = s.remote_endpoint(ec);
  if (ec) return;  // gone already
  if (links >= max_links)
    return refused(peer_of(from), "over " + std::to_string(max_links) + " connections at once");
  if (auto i = awaiting.find(from.address()); i != awaiting.end() && i->second >= max_awaiting_per_source)
    return refused(peer_of(from), "over " + std::to_string(max_awaiting_per_source) + " connections from " +
                                      from.address().to_string() + " awaiting their handshake");
  std::make_shared<link>(*this, std::move(s), from)->start();
}

std::unique_ptr<cluster_guard> cluster_guard::start(const std::string& bind_addr, std::uint16_t inner_port,
                                                    std::chrono::milliseconds handshake_timeout,
                                                    std::string& error) {
  auto p = std::make_unique<impl>();
  p->handshake_timeout = handshake_timeout;
  tcp::endpoint at;
  try {
    at = core::listen_endpoint(bind_addr);
  } catch (const std::runtime_error& e) {
    error = e.what();
    return nullptr;
  }
  asio::error_code ec;
  p->inner = tcp::endpoint{asio::ip::address_v4::loopback(), inner_port};
  p->acceptor.open(at.protocol(), ec);
  if (!ec) p->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) p->acceptor.bind(at, ec);
  if (!ec) p->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error = ec.message();
    return nullptr;
  }
  p->accept();
  p->thread = std::thread([io = &p->io] { io->run(); });
  return std::unique_ptr<cluster_guard>(new cluster_guard(std::move(p)));
}

cluster_guard::cluster_guard(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

cluster_guard::~cluster_guard() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t cluster_guard::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace scg::cluster

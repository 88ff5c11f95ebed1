#include "net/front_door.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/ssl.hpp>
#include <future>
#include <sched.h>
#include <stdexcept>
#include <thread>

#include "net/h2/endpoints.hpp"
#include "net/h2/worker.hpp"

namespace scg::net {

namespace {

/// "host:port" or "[v6]:port" as an endpoint to listen on.
asio::ip::tcp::endpoint listen_endpoint(const std::string& addr) {
  const auto parts = config::split_host_port(addr);
  if (!parts) throw std::runtime_error("bind_addr " + addr + " is not host:port");
  const auto& [host, port] = *parts;
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  asio::error_code ec;
  auto results = resolver.resolve(host.empty() ? "0.0.0.0" : host, port, asio::ip::tcp::resolver::passive, ec);
  if (ec || results.empty()) throw std::runtime_error("cannot resolve bind_addr " + addr + ": " + ec.message());
  return results.begin()->endpoint();
}

/// The CPUs this process may run on (its affinity mask), at least 1.
unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

/// Plaintext HTTP/2 without `tls:`; TLS with it, and mutual TLS with a client CA.
std::unique_ptr<asio::ssl::context> tls_context(const config::front_tls& tls) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  asio::error_code ec;
  ctx->use_certificate_chain_file(tls.cert_file, ec);
  if (ec) throw std::runtime_error("tls.cert_file: cannot read " + tls.cert_file + ": " + ec.message());
  ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
  if (ec) throw std::runtime_error("tls.key_file: cannot read " + tls.key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    throw std::runtime_error("tls.key_file does not match tls.cert_file");
  if (!tls.client_ca_file.empty()) {
    ctx->load_verify_file(tls.client_ca_file, ec);
    if (ec) throw std::runtime_error("tls.client_ca_file: cannot read " + tls.client_ca_file + ": " + ec.message());
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  // ALPN: gRPC clients ask for h2.
  SSL_CTX_set_alpn_select_cb(
      ctx->native_handle(),
      [](SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
         void*) -> int {
        static const unsigned char h2[] = {2, 'h', '2'};
        unsigned char* chosen = nullptr;
        if (SSL_select_next_proto(&chosen, outlen, h2, sizeof(h2), in, inlen) != OPENSSL_NPN_NEGOTIATED)
          return SSL_TLSEXT_ERR_ALERT_FATAL;
        *out = chosen;
        return SSL_TLSEXT_ERR_OK;
      },
      nullptr);
  return ctx;
}

}  // namespace

struct front_door::impl {
  forward_context& fx;
  std::vector<std::unique_ptr<h2::worker>> workers;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;
  std::unique_ptr<asio::ssl::context> tls;
  h2::tuning tune;
  h2::downstream_connection::call_factory make;
  std::size_t next = 0;
  std::shared_ptr<spdlog::logger> log = spdlog::get("forward");

  explicit impl(forward_context& f) : fx(f) {
    make = [this](h2::downstream_connection& d, std::int32_t stream) { return start_forward(fx, d, stream); };
  }

  /// Takes the next connection onto the next worker (round robin).
  void accept() {
    auto& target = *workers[next++ % workers.size()];
    acceptor->async_accept(target.io(), [this, &target](const asio::error_code& ec, asio::ip::tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) target.post([this, &target, s = std::move(s)]() mutable { open(target, std::move(s)); });
      else log->warn("accept_failed reason=\"{}\"", ec.message());
      accept();
    });
  }

  /// Starts a client connection on its worker (after the TLS handshake).
  void open(h2::worker& w, asio::ip::tcp::socket s) {
    auto& list = w.downstreams();
    list.erase(std::remove_if(list.begin(), list.end(), [](const auto& c) { return c.expired(); }), list.end());
    if (!tls) {
      auto c = std::make_shared<h2::downstream_connection>(w, std::move(s), make, tune);
      list.push_back(c);
      return c->start();
    }
    auto stream = std::make_shared<std::unique_ptr<h2::connection::tls_socket>>(
        std::make_unique<h2::connection::tls_socket>(std::move(s), *tls));
    auto timer = std::make_shared<asio::steady_timer>(w.io(), std::chrono::seconds(10));
    timer->async_wait([stream](const asio::error_code& ec) {
      if (!ec && *stream) (*stream)->next_layer().close();  // a handshake that never ends
    });
    (*stream)->async_handshake(asio::ssl::stream_base::server, [this, &w, stream, timer](const asio::error_code& ec) {
      timer->cancel();
      if (ec) {
        log->info("tls_handshake_failed reason=\"{}\"", ec.message());
        return;
      }
      auto c = std::make_shared<h2::downstream_connection>(w, std::move(*stream), make, tune);
      w.downstreams().push_back(c);
      c->start();
      w.flush_dirty();
    });
  }

  /// Runs `f` on every worker and waits for it.
  template <class F>
  void on_each_worker(F f) {
    std::vector<std::future<void>> done;
    for (auto& w : workers) {
      auto p = std::make_shared<std::promise<void>>();
      done.push_back(p->get_future());
      w->post([p, f, &w] {
        f(*w);
        p->set_value();
      });
    }
    for (auto& d : done) d.wait_for(std::chrono::seconds(5));
  }

  std::int64_t calls() const {
    std::int64_t n = 0;
    for (const auto& w : workers) n += w->calls.load();
    return n;
  }
};

front_door::front_door(const config::gateway& cfg, forward_context& fx) : impl_(std::make_unique<impl>(fx)) {
  if (cfg.tls) impl_->tls = tls_context(*cfg.tls);
  const auto n = cfg.workers > 0 ? static_cast<unsigned>(cfg.workers) : usable_cpus();
  for (unsigned i = 0; i < n; ++i) impl_->workers.push_back(std::make_unique<h2::worker>(static_cast<int>(i)));
  const auto ep = listen_endpoint(cfg.bind_addr);
  auto& a = impl_->acceptor = std::make_unique<asio::ip::tcp::acceptor>(impl_->workers[0]->io());
  asio::error_code ec;
  a->open(ep.protocol(), ec);
  if (!ec) a->set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) a->bind(ep, ec);
  if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen for gRPC on bind_addr " + cfg.bind_addr + ": " + ec.message());
  port_ = a->local_endpoint().port();
  impl_->accept();
  for (auto& w : impl_->workers) w->start();
}

front_door::~front_door() {
  for (auto& w : impl_->workers) w->stop();
}

void front_door::shutdown(std::chrono::system_clock::time_point deadline) {
  impl_->on_each_worker([this](h2::worker& w) {
    if (w.index() == 0) impl_->acceptor->close();
    for (auto& weak : w.downstreams())
      if (auto c = weak.lock()) c->go_away();
    w.flush_dirty();
  });
  for (int i = 0; i < 100000 && impl_->calls() > 0 && std::chrono::system_clock::now() < deadline; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (impl_->calls() > 0) {
    impl_->on_each_worker([](h2::worker& w) {
      for (auto& weak : w.downstreams())
        if (auto c = weak.lock())
          for (auto& call : c->calls()) abandon_call(*call, "scg is shutting down (shutdown.deadline_secs passed)");
      w.flush_dirty();
    });
    // Let the statuses reach the clients.
    for (int i = 0; i < 50 && impl_->calls() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& w : impl_->workers) w->stop();
}

}  // namespace scg::net

#include "net/front_door.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/ssl.hpp>
#include <future>
#include <sched.h>
#include <sys/resource.h>

#include <stdexcept>
#include <thread>

#include "core/address.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/h2/endpoints.hpp"
#include "net/h2/worker.hpp"
#include "core/listen_endpoint.hpp"
#include "net/net_stats.hpp"

namespace scg::net {

namespace {

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

/// The data plane's settings from the config (docs/hardening.md).
h2::tuning tuning_of(const config::gateway& cfg, unsigned workers) {
  h2::tuning t;
  using std::chrono::seconds;
  t.handshake_timeout = seconds(cfg.limits.handshake_timeout_secs);
  t.idle_timeout = seconds(cfg.limits.idle_connection_secs);
  t.first_message_timeout = seconds(cfg.limits.first_message_secs);
  t.keepalive_interval = seconds(cfg.keepalive.interval_secs);
  t.keepalive_timeout = seconds(cfg.keepalive.timeout_secs);
  t.worker_buffer_bytes = (std::int64_t{cfg.limits.buffer_mib} << 20) / workers;
  t.client_connections = &global_net_stats().client_connections;
  return t;
}

}  // namespace

std::size_t client_connection_cap(std::size_t configured) {
  if (configured > 0) return configured;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1u << 20;
  // Keep descriptors for backends, the admin and cluster ports, files.
  const auto n = static_cast<std::size_t>(lim.rlim_cur);
  return std::max<std::size_t>(16, n - std::min<std::size_t>(n / 2, 256));
}

struct front_door::impl {
  forward_context& fx;
  std::vector<std::unique_ptr<h2::worker>> workers;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;
  std::unique_ptr<asio::ssl::context> tls;
  h2::tuning tune;
  std::size_t max_clients = 0;  ///< limits.max_client_connections, or derived from the open-file limit
  std::unique_ptr<asio::steady_timer> accept_pause;
  h2::downstream_connection::call_factory make;
  std::size_t next = 0;
  std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  core::log_throttle accept_throttle, refuse_throttle;

  explicit impl(forward_context& f) : fx(f) {
    make = [this](h2::downstream_connection& d, std::int32_t stream) { return start_forward(fx, d, stream); };
  }

  /// Takes the next connection onto the next worker (round robin). When
  /// accept fails for want of descriptors or memory it waits 100 ms (a
  /// spinning loop would starve the worker), then goes on.
  void accept() {
    auto& target = *workers[next++ % workers.size()];
    acceptor->async_accept(target.io(), [this, &target](const asio::error_code& ec, asio::ip::tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) {
        global_net_stats().client_connections.fetch_add(1, std::memory_order_relaxed);
        target.post([this, &target, s = std::move(s)]() mutable { open(target, std::move(s)); });
        return accept();
      }
      core::bump(global_net_stats().conn_accept_errors_total);
      if (auto held = accept_throttle.pass(); held >= 0)
        log->warn("accept_failed reason=\"{}\" client_connections={} suppressed={}", ec.message(),
                  global_net_stats().client_connections.load(), held);
      const bool out_of_resources = ec == asio::error::no_descriptors || ec.value() == ENFILE ||
                                    ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
      if (!out_of_resources) return accept();
      accept_pause->expires_after(std::chrono::milliseconds(100));
      accept_pause->async_wait([this](const asio::error_code& wec) {
        if (!wec && acceptor->is_open()) accept();
      });
    });
  }

  /// Room for one more client connection on `w`: past the cap, the oldest
  /// connection still without its HTTP/2 preface goes (a flood of silent
  /// connections cannot keep real clients out); false when none is.
  bool make_room(h2::worker& w) {
    if (global_net_stats().client_connections.load(std::memory_order_relaxed) <= max_clients) return true;
    for (auto& weak : w.downstreams()) {
      auto c = weak.lock();
      if (!c || c->closed() || c->preface_done()) continue;
      core::bump(global_net_stats().conn_evicted_total);
      c->close("closed without its HTTP/2 preface to make room (limits.max_client_connections)");
      return true;
    }
    return false;
  }

  /// Starts a client connection on its worker (after the TLS handshake).
  void open(h2::worker& w, asio::ip::tcp::socket s) {
    auto& list = w.downstreams();
    list.erase(std::remove_if(list.begin(), list.end(), [](const auto& c) { return c.expired(); }), list.end());
    if (!make_room(w)) {
      global_net_stats().client_connections.fetch_sub(1, std::memory_order_relaxed);
      core::bump(global_net_stats().conn_refused_total);
      if (auto held = refuse_throttle.pass(); held >= 0)
        log->warn("connection_refused reason=\"limits.max_client_connections ({}) open\" suppressed={}", max_clients,
                  held);
      asio::error_code ignored;
      s.close(ignored);
      return;
    }
    if (!tls) {
      auto c = std::make_shared<h2::downstream_connection>(w, std::move(s), make, tune);
      list.push_back(c);
      return c->start();
    }
    auto stream = std::make_shared<std::unique_ptr<h2::connection::tls_socket>>(
        std::make_unique<h2::connection::tls_socket>(std::move(s), *tls));
    auto timer = std::make_shared<asio::steady_timer>(w.io(), tune.handshake_timeout);
    timer->async_wait([stream](const asio::error_code& ec) {
      if (ec || !*stream) return;
      core::bump(global_net_stats().conn_handshake_timeouts_total);
      asio::error_code ignored;
      (*stream)->next_layer().close(ignored);  // a handshake that never ends
    });
    (*stream)->async_handshake(asio::ssl::stream_base::server, [this, &w, stream, timer](const asio::error_code& ec) {
      timer->cancel();
      if (ec) {
        global_net_stats().client_connections.fetch_sub(1, std::memory_order_relaxed);
        static core::log_throttle throttle;
        if (auto held = throttle.pass(); held >= 0)
          log->info("tls_handshake_failed reason=\"{}\" suppressed={}", ec.message(), held);
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
  impl_->tune = tuning_of(cfg, n);
  impl_->max_clients = client_connection_cap(static_cast<std::size_t>(cfg.limits.max_client_connections));
  for (unsigned i = 0; i < n; ++i)
    impl_->workers.push_back(std::make_unique<h2::worker>(static_cast<int>(i), impl_->tune));
  const auto ep = core::listen_endpoint(cfg.bind_addr);
  auto& a = impl_->acceptor = std::make_unique<asio::ip::tcp::acceptor>(impl_->workers[0]->io());
  asio::error_code ec;
  a->open(ep.protocol(), ec);
  if (!ec) a->set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) a->bind(ep, ec);
  if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen for gRPC on bind_addr " + cfg.bind_addr + ": " + ec.message());
  port_ = a->local_endpoint().port();
  impl_->accept_pause = std::make_unique<asio::steady_timer>(impl_->workers[0]->io());
  spdlog::get("forward")->info("front_door workers={} max_client_connections={} buffer_mib={}", n,
                               impl_->max_clients, cfg.limits.buffer_mib);
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

#include "net/front_door.hpp"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace scg::net {

struct front_door::service final : grpc::CallbackGenericService {
  explicit service(forward_context& fx) : fx(fx) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return start_forward(fx, ctx);
  }
  forward_context& fx;
};

namespace {

std::string read_file(const std::string& path, const char* key) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) throw std::runtime_error(std::string(key) + ": cannot read " + path);
  return text.str();
}

/// Plaintext HTTP/2 without `tls:`; TLS with it, and mutual TLS with a client CA.
std::shared_ptr<grpc::ServerCredentials> credentials(const std::optional<config::front_tls>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls->client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back(
      {read_file(tls->key_file, "tls.key_file"), read_file(tls->cert_file, "tls.cert_file")});
  if (!tls->client_ca_file.empty()) options.pem_root_certs = read_file(tls->client_ca_file, "tls.client_ca_file");
  return grpc::SslServerCredentials(options);
}

}  // namespace

front_door::front_door(const config::gateway& cfg, forward_context& fx)
    : service_(std::make_unique<service>(fx)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.bind_addr, credentials(cfg.tls), &port_);
  // gRPC's default SO_REUSEPORT would let a second scg share a busy port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const int max = static_cast<int>(cfg.limits.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max);
  builder.SetMaxSendMessageSize(max);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Spark clients keep connections open for hours and may ping.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterCallbackGenericService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0)
    throw std::runtime_error("cannot listen for gRPC on bind_addr " + cfg.bind_addr +
                             (cfg.tls ? " (check tls.cert_file and tls.key_file: a pair that does not match is refused)"
                                      : ""));
}

front_door::~front_door() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

void front_door::shutdown(std::chrono::system_clock::time_point deadline) {
  server_->Shutdown(deadline);
  server_->Wait();
}

}  // namespace scg::net

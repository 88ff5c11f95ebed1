#pragma once
// Where a listener binds: "host:port" or "[v6]:port" (port 0: a free one),
// for the front door and the cluster port's guard.

#include <asio.hpp>

#include <stdexcept>
#include <string>

#include "core/address.hpp"

namespace scg::core {

/// `addr` as an endpoint to listen on; throws std::runtime_error naming it
/// when it is not host:port or does not resolve (start-up only).
inline asio::ip::tcp::endpoint listen_endpoint(const std::string& addr) {
  const auto parts = core::parse_host_port(addr, true);
  if (!parts) throw std::runtime_error("bind_addr " + addr + " is not host:port");
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  asio::error_code ec;
  auto results = resolver.resolve(parts->host, std::to_string(parts->port), asio::ip::tcp::resolver::passive, ec);
  if (ec || results.empty()) throw std::runtime_error("cannot resolve bind_addr " + addr + ": " + ec.message());
  return results.begin()->endpoint();
}

}  // namespace scg::core

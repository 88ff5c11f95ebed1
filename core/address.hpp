#pragma once
// Addresses and URLs as scg reads them: config, command lines, peers and
// documents from identity providers all go through these, so every part of
// scg accepts and refuses the same strings. Pure: no look-ups, no I/O.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace scg::core {

/// A host and a port; the host is a DNS name, an IPv4 address or an IPv6
/// address without its brackets.
struct host_port {
  std::string host;
  std::uint16_t port = 0;

  /// "host:port", an IPv6 host in brackets: what parse_host_port reads back.
  std::string str() const;
};

/// "host:port" or "[v6]:port", the host a DNS name (letters, digits, inner
/// hyphens), a dotted IPv4 address or an IPv6 address; the port decimal in
/// 1..65535, or 0 too when `allow_zero_port` (a listener that picks a free
/// one). Nullopt for anything else, an unbracketed IPv6 host included.
std::optional<host_port> parse_host_port(std::string_view text, bool allow_zero_port = false);

/// `host` as it goes before ":port": in brackets when it is IPv6.
std::string bracketed(std::string_view host);

/// An http or https URL split for an HTTP client.
struct url {
  std::string scheme;  ///< "http" or "https"
  std::string host;    ///< as in host_port: no brackets
  std::uint16_t port = 0;
  std::string path;  ///< the request target: "/" at least, query kept, fragment dropped

  /// "scheme://host:port", the port always written: what an HTTP client
  /// connects to, and what parse_url reads back.
  std::string origin() const;
};

/// "http(s)://HOST[:PORT][/PATH][?QUERY][#FRAGMENT]", HOST and PORT as
/// parse_host_port reads them (port 0 refused), PORT 80 or 443 when absent.
/// Nullopt for another scheme, a missing host, user info or a bad port.
std::optional<url> parse_url(std::string_view text);

/// `url` with every "{host}" replaced by `host` (a ui_url template).
std::string with_host(std::string url, std::string_view host);

/// `text` with each byte `keep` refuses written as %XX (uppercase hex).
std::string percent_encode(std::string_view text, bool (*keep)(unsigned char));

}  // namespace scg::core

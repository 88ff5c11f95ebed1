#include "core/address.hpp"

#include <arpa/inet.h>

namespace scg::core {
namespace {

/// A DNS name: dot-separated labels of letters, digits and inner hyphens.
bool valid_dns_name(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  std::size_t label = 0;
  for (std::size_t i = 0; i <= h.size(); ++i) {
    const char c = i < h.size() ? h[i] : '.';
    if (c == '.') {
      if (label == 0 || label > 63 || h[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && label > 0)) return false;
    ++label;
  }
  return true;
}

/// The host of "name", "1.2.3.4" or "[v6]", brackets removed.
std::optional<std::string> parse_host(std::string_view text) {
  if (!text.empty() && text.front() == '[') {
    if (text.size() < 2 || text.back() != ']') return std::nullopt;
    std::string host(text.substr(1, text.size() - 2));
    in6_addr v6;
    if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) return std::nullopt;
    return host;
  }
  std::string host(text);
  // All digits and dots: it must be a dotted IPv4 address, not a name.
  if (host.find_first_not_of("0123456789.") == std::string::npos) {
    in_addr v4;
    if (inet_pton(AF_INET, host.c_str(), &v4) != 1) return std::nullopt;
    return host;
  }
  if (!valid_dns_name(host)) return std::nullopt;
  return host;
}

/// Decimal digits only (no sign, no spaces), in 1..65535 or 0 when allowed.
std::optional<std::uint16_t> parse_port(std::string_view s, bool allow_zero) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > 65535 || (v == 0 && !allow_zero)) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

/// Where the ":port" of "host:port" or "[v6]:port" starts; npos when there is
/// none (the colons inside brackets belong to the host).
std::size_t port_colon(std::string_view text) {
  const auto colon = text.rfind(':');
  const auto close = text.rfind(']');
  return close != std::string_view::npos && colon != std::string_view::npos && colon < close ? std::string_view::npos
                                                                                           : colon;
}

}  // namespace

std::string host_port::str() const { return bracketed(host) + ":" + std::to_string(port); }

std::optional<host_port> parse_host_port(std::string_view text, bool allow_zero_port) {
  const auto colon = port_colon(text);
  if (colon == std::string_view::npos) return std::nullopt;
  auto host = parse_host(text.substr(0, colon));
  auto port = parse_port(text.substr(colon + 1), allow_zero_port);
  if (!host || !port) return std::nullopt;
  return host_port{std::move(*host), *port};
}

std::string bracketed(std::string_view host) {
  std::string out(host);
  return out.find(':') == std::string::npos ? out : "[" + out + "]";
}

std::string url::origin() const { return scheme + "://" + host_port{host, port}.str(); }

std::optional<url> parse_url(std::string_view text) {
  url out;
  std::uint16_t default_port = 0;
  for (auto [scheme, port] : {std::pair{"http", 80}, std::pair{"https", 443}}) {
    const std::string prefix = std::string(scheme) + "://";
    if (text.substr(0, prefix.size()) != prefix) continue;
    out.scheme = scheme;
    default_port = static_cast<std::uint16_t>(port);
    text.remove_prefix(prefix.size());
    break;
  }
  if (out.scheme.empty()) return std::nullopt;
  const auto authority_end = text.find_first_of("/?#");
  const auto authority = text.substr(0, authority_end);
  if (port_colon(authority) != std::string_view::npos) {
    auto hp = parse_host_port(authority);
    if (!hp) return std::nullopt;
    out.host = std::move(hp->host);
    out.port = hp->port;
  } else {
    auto host = parse_host(authority);
    if (!host) return std::nullopt;
    out.host = std::move(*host);
    out.port = default_port;
  }
  // A fragment is the client's business; it is never sent.
  auto target = authority_end == std::string_view::npos ? std::string_view{} : text.substr(authority_end);
  target = target.substr(0, target.find('#'));
  out.path = target.empty() || target.front() != '/' ? "/" + std::string(target) : std::string(target);
  return out;
}

std::string with_host(std::string url, std::string_view host) {
  constexpr std::string_view mark = "{host}";
  for (auto pos = url.find(mark); pos != std::string::npos; pos = url.find(mark, pos + host.size()))
    url.replace(pos, mark.size(), host);
  return url;
}

std::string percent_encode(std::string_view text, bool (*keep)(unsigned char)) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (keep(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace scg::core

#include "net/h2/grpc_frames.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include "core/address.hpp"

namespace scg::net::h2 {

std::string message_prefix(std::size_t length) {
  std::string p(5, '\0');
  p[1] = static_cast<char>((length >> 24) & 0xff);
  p[2] = static_cast<char>((length >> 16) & 0xff);
  p[3] = static_cast<char>((length >> 8) & 0xff);
  p[4] = static_cast<char>(length & 0xff);
  return p;
}

std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view text) {
  if (text.size() < 2 || text.size() > 9) return std::nullopt;
  std::int64_t n = 0;
  for (char c : text.substr(0, text.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  using namespace std::chrono;
  switch (text.back()) {
    // 8 digits of hours overflow int64 nanoseconds: longer than 99999999M
    // (about 190 years, the most the other units reach) counts as that.
    case 'H': return n > 1'666'666 ? duration_cast<nanoseconds>(minutes(99'999'999)) : duration_cast<nanoseconds>(hours(n));
    case 'M': return duration_cast<nanoseconds>(minutes(n));
    case 'S': return duration_cast<nanoseconds>(seconds(n));
    case 'm': return duration_cast<nanoseconds>(milliseconds(n));
    case 'u': return duration_cast<nanoseconds>(microseconds(n));
    case 'n': return nanoseconds(n);
    default: return std::nullopt;
  }
}

std::string format_timeout(std::chrono::nanoseconds t) {
  constexpr std::int64_t max = 99'999'999;
  std::int64_t n = std::max<std::int64_t>(t.count(), 0);
  struct unit {
    std::int64_t per;
    char c;
  };
  // Each step divides by the next unit, rounding up so a deadline never shrinks.
  static constexpr unit steps[] = {{1000, 'u'}, {1000, 'm'}, {1000, 'S'}, {60, 'M'}, {60, 'H'}};
  char c = 'n';
  for (const auto& s : steps) {
    if (n <= max) break;
    n = n / s.per + (n % s.per != 0);  // not (n + per - 1) / per: that overflows near the maximum
    c = s.c;
  }
  return std::to_string(std::min(n, max)) + c;
}

std::string percent_encode(std::string_view text) {
  return core::percent_encode(text, [](unsigned char c) { return c >= 0x20 && c <= 0x7e && c != '%'; });
}

std::string percent_decode(std::string_view text) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && digit(text[i + 1]) >= 0 && digit(text[i + 2]) >= 0) {
      out += static_cast<char>(digit(text[i + 1]) * 16 + digit(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> inflate(std::string_view encoding, std::string_view bytes, std::size_t limit,
                                   bool* too_large) {
  int window_bits;
  if (encoding == "gzip") window_bits = 16 + MAX_WBITS;
  else if (encoding == "deflate") window_bits = MAX_WBITS;
  else return std::nullopt;
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return std::nullopt;
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() >= limit) break;
    const auto at = out.size();
    out.resize(std::min(limit, at + std::max<std::size_t>(4096, bytes.size() * 2)));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = static_cast<uInt>(out.size() - at);
    rc = ::inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
  }
  if (too_large && rc == Z_OK && out.size() >= limit) {
    // Full: one more byte tells a larger message from a truncated one.
    unsigned char extra = 0;
    z.next_out = &extra;
    z.avail_out = 1;
    const int more = ::inflate(&z, Z_NO_FLUSH);
    *too_large = z.avail_out == 0 && (more == Z_OK || more == Z_STREAM_END);
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

}  // namespace scg::net::h2

#include "core/ids.hpp"

#include <random>

namespace scg::core {

std::string new_request_id() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  static const char hex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int half = 0; half < 2; ++half) {
    auto v = gen();
    for (int i = 0; i < 16; ++i) out[half * 16 + i] = hex[(v >> (i * 4)) & 0xf];
  }
  return out;
}

std::string new_uuid() {
  auto hex = new_request_id();
  hex[12] = '4';                                              // version 4
  hex[16] = "89ab"[static_cast<unsigned char>(hex[16]) % 4];  // variant 10xx
  return hex.substr(0, 8) + '-' + hex.substr(8, 4) + '-' + hex.substr(12, 4) + '-' + hex.substr(16, 4) + '-' +
         hex.substr(20);
}

}  // namespace scg::core

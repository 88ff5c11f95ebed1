#pragma once
// What the three connection files share (connection.cpp, the transport;
// downstream_connection.cpp and upstream_connection.cpp, the two sides):
// nghttp2 header and DATA helpers, and the data plane's logger. Only those
// three files include it.

#include <nghttp2/nghttp2.h>
#include <spdlog/fwd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/h2/bytes.hpp"

namespace scg::net::h2::detail {

template <class Headers>
std::vector<nghttp2_nv> nv_of(const Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const auto& h : headers)
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(), h.value.size(),
                  NGHTTP2_NV_FLAG_NONE});
  return nv;
}

inline std::string_view sv(const std::uint8_t* p, std::size_t n) { return {reinterpret_cast<const char*>(p), n}; }

/// Removes `stream`'s call from `streams` and returns it (null when none).
template <class Map>
typename Map::mapped_type take(Map& streams, std::int32_t stream) {
  auto it = streams.find(stream);
  if (it == streams.end()) return {};
  auto c = std::move(it->second);
  streams.erase(it);
  return c;
}

/// Hands a DATA payload to the stream's call, as a slice of the read buffer.
/// The connection window goes back at once: the bytes are in their stream's
/// queue now, bounded by the stream's window, which goes back only when they
/// leave (a stream whose reader stalls holds back no other stream).
template <class Conn, class Call>
int pass_data(nghttp2_session* session, Conn* self, std::int32_t stream, const std::uint8_t* data, std::size_t len,
              void (Call::*deliver)(slice)) {
  if (!self->check(nghttp2_session_consume_connection(session, len), "nghttp2_session_consume_connection"))
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (auto* c = self->find(stream)) (c->*deliver)(self->slice_of(data, len));
  return 0;
}

/// The "forward" logger (defined in connection.cpp).
spdlog::logger& net_log();

/// "8 s" for log lines and reasons.
std::string secs(std::chrono::milliseconds d);

}  // namespace scg::net::h2::detail

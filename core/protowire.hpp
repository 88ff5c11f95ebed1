#pragma once
// Protobuf wire format by hand, for the few fields scg writes or rewrites in
// place (user_context.user_id, Config values, status details, the requests of
// its own probes and interrupts). The routing scanner (net/wire) reads
// segments in place instead.
// Reading checks the wire format; unknown fields pass through as raw bytes.

#include <cstdint>
#include <string>
#include <string_view>

namespace scg::core::protowire {

inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline void put_tag(std::string& out, std::uint32_t field, std::uint32_t type) {
  put_varint(out, std::uint64_t{field} << 3 | type);
}

/// A length-delimited field (string, bytes, embedded message).
inline void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

inline void put_uint(std::string& out, std::uint32_t field, std::uint64_t v) {
  put_tag(out, field, 0);
  put_varint(out, v);
}

/// One field as read: `whole` spans it from its tag to its end, so an
/// untouched field is copied back byte for byte.
struct field {
  std::uint32_t number = 0;
  std::uint32_t type = 0;
  std::uint64_t varint = 0;  ///< wire type 0
  std::string_view payload;  ///< wire type 2
  std::string_view whole;
};

/// Reads the next field of `in` and advances past it (groups are skipped
/// whole). False on malformed wire data; `in` is then unspecified.
bool next(std::string_view& in, field& f);

}  // namespace scg::core::protowire

#include "core/protowire.hpp"

namespace scg::core::protowire {

namespace {

constexpr int max_group_depth = 32;

bool read_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int i = 0; i < 10 && !in.empty(); ++i) {
    auto b = static_cast<std::uint8_t>(in.front());
    in.remove_prefix(1);
    v |= std::uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

/// Reads one field; inside a group, `end_of` is the group's number and its
/// end tag is reported through `ended`.
bool read_field(std::string_view& in, field& f, int depth, std::uint32_t end_of, bool& ended) {
  const char* start = in.data();
  std::uint64_t tag;
  if (!read_varint(in, tag)) return false;
  const std::uint64_t number = tag >> 3;
  if (number == 0 || number > (1u << 29) - 1) return false;
  f.number = static_cast<std::uint32_t>(number);
  f.type = static_cast<std::uint32_t>(tag & 7);
  f.payload = {};
  switch (f.type) {
    case 0:
      if (!read_varint(in, f.varint)) return false;
      break;
    case 1:
    case 5: {
      std::size_t n = f.type == 1 ? 8 : 4;
      if (in.size() < n) return false;
      in.remove_prefix(n);
      break;
    }
    case 2: {
      std::uint64_t len;
      if (!read_varint(in, len) || len > in.size()) return false;
      f.payload = in.substr(0, len);
      in.remove_prefix(len);
      break;
    }
    case 3: {
      if (depth >= max_group_depth) return false;
      for (;;) {
        if (in.empty()) return false;  // unterminated group
        field inner;
        bool inner_ended = false;
        if (!read_field(in, inner, depth + 1, f.number, inner_ended)) return false;
        if (inner_ended) break;
      }
      break;
    }
    case 4:
      if (end_of != f.number) return false;  // an end tag with no group open
      ended = true;
      break;
    default:
      return false;
  }
  f.whole = std::string_view(start, static_cast<std::size_t>(in.data() - start));
  return true;
}

}  // namespace

bool next(std::string_view& in, field& f) {
  bool ended = false;
  return read_field(in, f, 0, 0, ended) && !ended;
}

}  // namespace scg::core::protowire

#pragma once
// Protobuf wire format by hand: one reader for the whole project. The
// routing scanner (net/wire) walks messages in place across gRPC's segments
// with it; the few fields scg rewrites (user_context.user_id, Config values)
// are read field by field with next(); writers build scg's own requests
// (probes, interrupts) and status details. Reading checks the wire format;
// unknown fields pass through as raw bytes.

#include <algorithm>
#include <cstddef>
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

// --- reading ----------------------------------------------------------------

/// A run of contiguous bytes; a message may span several (as a worker reads it).
struct segment {
  const std::uint8_t* data;
  std::size_t size;
};

inline constexpr std::uint64_t max_depth = 32;  ///< groups and nested messages
inline constexpr std::uint64_t max_field_number = (1u << 29) - 1;

namespace detail {
// Failure reasons are built only on the failure path, so allocating here is fine.
inline void append(std::string& s, std::string_view v) { s += v; }
inline void append(std::string& s, std::uint64_t n) { s += std::to_string(n); }
}  // namespace detail

/// Sets `reason` from its parts and returns false.
template <class... Parts>
bool fail(std::string& reason, const Parts&... parts) {
  reason.clear();
  (detail::append(reason, parts), ...);
  return false;
}

/// A cursor over a message in `count` segments. `limit` bounds reads, so a
/// nested message is walked in place by narrowing it.
class reader {
 public:
  reader(const segment* segs, std::size_t count) : segs_(segs) {
    for (std::size_t i = 0; i < count; ++i) limit_ += segs[i].size;
  }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return limit_ - pos_; }
  std::size_t limit() const { return limit_; }
  void set_limit(std::size_t limit) { limit_ = limit; }

  bool next(std::uint8_t& b) {
    if (pos_ == limit_) return false;
    settle();
    b = segs_[seg_].data[off_++];
    ++pos_;
    return true;
  }

  /// Moves past `n` bytes without touching them; requires n <= left().
  void skip(std::size_t n) {
    pos_ += n;
    while (n > 0) {
      settle();
      std::size_t take = std::min(n, segs_[seg_].size - off_);
      off_ += take;
      n -= take;
    }
  }

  /// Copies the next `n` bytes into `out`; requires n <= left().
  void copy(std::size_t n, std::string& out) {
    out.clear();
    if (n == 0) return;
    settle();
    const auto* p = reinterpret_cast<const char*>(segs_[seg_].data + off_);
    if (segs_[seg_].size - off_ >= n) {  // the common case: one segment holds it all
      out.assign(p, n);
      off_ += n;
      pos_ += n;
      return;
    }
    out.reserve(n);
    pos_ += n;
    while (n > 0) {
      settle();
      std::size_t take = std::min(n, segs_[seg_].size - off_);
      out.append(reinterpret_cast<const char*>(segs_[seg_].data + off_), take);
      off_ += take;
      n -= take;
    }
  }

 private:
  // Steps over exhausted (or empty) segments; only called while bytes remain.
  void settle() {
    while (off_ == segs_[seg_].size) {
      ++seg_;
      off_ = 0;
    }
  }

  const segment* segs_;
  std::size_t seg_ = 0, off_ = 0, pos_ = 0, limit_ = 0;
};

inline bool read_varint(reader& r, std::uint64_t& v, std::string& reason) {
  const std::size_t at = r.pos();
  v = 0;
  for (int i = 0; i < 10; ++i) {
    std::uint8_t b;
    if (!r.next(b)) return fail(reason, "truncated varint at byte ", at);
    v |= std::uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) return true;
  }
  return fail(reason, "varint longer than 10 bytes at byte ", at);
}

/// One field as the walker met it. For wire type 0 `value` is the varint, for
/// wire type 2 the length of the payload, which starts at the reader's position.
struct walked {
  std::uint32_t number;
  std::uint32_t type;
  std::uint64_t value;
  std::size_t at;  ///< byte offset of the tag
};

/// What a handler did with a field: left it to the walker, consumed it, or failed.
enum class step { skip, done, fail };

inline step skip_field(reader&, const walked&) { return step::skip; }

template <class Handler>
bool walk(reader& r, std::string& reason, Handler&& on, std::uint64_t depth = 0, const walked* group = nullptr);

/// What read_field met: a field, the end tag of the group being read, or bad bytes.
enum class met { field, group_end, error };

/// Reads one field's tag and, for wire types 0 and 2, its varint or payload
/// length (the payload is left to the caller); fixed fields and groups are
/// skipped whole. `group`: the group being read, whose end tag is expected.
inline met read_field(reader& r, walked& f, std::string& reason, std::uint64_t depth, const walked* group) {
  f = {0, 0, 0, r.pos()};
  std::uint64_t tag;
  if (!read_varint(r, tag, reason)) return met::error;
  if (tag >> 3 == 0 || tag >> 3 > max_field_number) {
    fail(reason, "invalid field number ", tag >> 3, " at byte ", f.at);
    return met::error;
  }
  f.number = static_cast<std::uint32_t>(tag >> 3);
  f.type = static_cast<std::uint32_t>(tag & 7);
  switch (f.type) {
    case 0:
      return read_varint(r, f.value, reason) ? met::field : met::error;
    case 1:
    case 5: {
      std::size_t n = f.type == 1 ? 8 : 4;
      if (r.left() < n) {
        fail(reason, "truncated fixed field ", f.number, " at byte ", f.at);
        return met::error;
      }
      r.skip(n);
      return met::field;
    }
    case 2:
      if (!read_varint(r, f.value, reason)) return met::error;
      if (f.value > r.left()) {
        fail(reason, "truncated length-delimited field ", f.number, " at byte ", f.at);
        return met::error;
      }
      return met::field;
    case 3:
      return walk(r, reason, skip_field, depth + 1, &f) ? met::field : met::error;
    case 4:
      if (group && group->number == f.number) return met::group_end;
      fail(reason, "unmatched end-group for field ", f.number, " at byte ", f.at);
      return met::error;
    default:
      fail(reason, "invalid wire type ", f.type, " for field ", f.number, " at byte ", f.at);
      return met::error;
  }
}

/// Walks fields up to the reader's limit (or, inside a group, up to the
/// group's end tag), checking the wire format. `on` sees only varint and
/// length-delimited fields; whatever it does not consume is skipped.
template <class Handler>
bool walk(reader& r, std::string& reason, Handler&& on, std::uint64_t depth, const walked* group) {
  if (depth > max_depth)
    return fail(reason, "groups nested deeper than ", max_depth, " at byte ", group ? group->at : r.pos());
  while (r.left() > 0) {
    walked f;
    switch (read_field(r, f, reason, depth, group)) {
      case met::error: return false;
      case met::group_end: return true;
      case met::field: break;
    }
    if (f.type != 0 && f.type != 2) continue;
    step s = on(r, f);
    if (s == step::fail) return false;
    if (s == step::skip && f.type == 2) r.skip(f.value);
  }
  if (group) return fail(reason, "unterminated group field ", group->number, " at byte ", group->at);
  return true;
}

/// One field of a contiguous message, as next() reads it: `whole` spans it
/// from its tag to its end, so an untouched field is copied back byte for byte.
struct field {
  std::uint32_t number = 0;
  std::uint32_t type = 0;
  std::uint64_t varint = 0;  ///< wire type 0
  std::string_view payload;  ///< wire type 2
  std::string_view whole;
};

/// Reads the next field of `in` and advances past it (groups are skipped
/// whole), with walk()'s checks. False on malformed wire data; `in` is then
/// unspecified.
bool next(std::string_view& in, field& f);

}  // namespace scg::core::protowire

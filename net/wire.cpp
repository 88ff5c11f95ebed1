#include "net/wire.hpp"

#include <algorithm>
#include <array>

namespace scg::net {
namespace {

/// Where an rpc's request keeps its routing fields; 0 means "not carried".
/// Fields 1 (session_id) and 2 (user_context) are common to every request.
struct request_layout {
  std::uint32_t operation_id, observed, new_session_id, interrupt_type, release_all;
};
constexpr std::array<request_layout, rpc_count> request_layouts = {{
    {6, 8, 0, 0, 0},   // ExecutePlan
    {0, 17, 0, 0, 0},  // AnalyzePlan
    {0, 8, 0, 0, 0},   // Config
    {0, 7, 0, 0, 0},   // AddArtifacts
    {0, 5, 0, 0, 0},   // ArtifactStatus
    {6, 7, 0, 4, 0},   // Interrupt
    {3, 6, 0, 0, 0},   // ReattachExecute
    {3, 7, 0, 0, 5},   // ReleaseExecute
    {0, 0, 0, 0, 0},   // ReleaseSession
    {0, 5, 0, 0, 0},   // FetchErrorDetails
    {0, 5, 4, 0, 0},   // CloneSession
    {0, 4, 0, 0, 0},   // GetStatus
    {0, 0, 0, 0, 0},   // unknown
}};

/// Where an rpc's response keeps its routing fields; 0 means "not carried".
struct response_layout {
  std::uint32_t session_id, server_side, operation_id, new_session_id, new_server_side,
      result_complete;
};
constexpr response_layout execute_plan_response = {1, 15, 12, 0, 0, 14};
constexpr std::array<response_layout, rpc_count> response_layouts = {{
    execute_plan_response,  // ExecutePlan
    {1, 15, 0, 0, 0, 0},    // AnalyzePlan
    {1, 4, 0, 0, 0, 0},     // Config
    {2, 3, 0, 0, 0, 0},     // AddArtifacts
    {2, 3, 0, 0, 0, 0},     // ArtifactStatus
    {1, 3, 0, 0, 0, 0},     // Interrupt
    execute_plan_response,  // ReattachExecute streams ExecutePlanResponses
    {1, 3, 2, 0, 0, 0},     // ReleaseExecute
    {1, 2, 0, 0, 0, 0},     // ReleaseSession
    {4, 3, 0, 0, 0, 0},     // FetchErrorDetails
    {1, 2, 0, 3, 4, 0},     // CloneSession
    {1, 2, 0, 0, 0, 0},     // GetStatus
    {1, 0, 0, 0, 0, 0},     // unknown
}};

constexpr std::uint64_t max_depth = 32;  // groups and nested messages
constexpr std::uint64_t max_field_number = (1u << 29) - 1;

// Failure reasons are built only on the failure path, so allocating here is fine.
void append(std::string& s, std::string_view v) { s += v; }
void append(std::string& s, std::uint64_t n) { s += std::to_string(n); }

template <class... Parts>
bool fail(std::string& reason, const Parts&... parts) {
  reason.clear();
  (append(reason, parts), ...);
  return false;
}

/// A cursor over a segmented message. `limit` bounds reads, so a nested
/// message is walked in place by narrowing it.
class reader {
public:
  explicit reader(const segments& segs) : segs_(segs) {
    for (const auto& s : segs) limit_ += s.size;
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

  const segments& segs_;
  std::size_t seg_ = 0, off_ = 0, pos_ = 0, limit_ = 0;
};

bool read_varint(reader& r, std::uint64_t& v, std::string& reason) {
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
struct field {
  std::uint32_t number;
  std::uint32_t type;
  std::uint64_t value;
  std::size_t at;  ///< byte offset of the tag
};

/// What a handler did with a field: left it to the walker, consumed it, or failed.
enum class step { skip, done, fail };

step skip_field(reader&, const field&) { return step::skip; }

/// Walks fields up to the reader's limit (or, inside a group, up to the
/// group's end tag), checking the wire format. `on` sees only varint and
/// length-delimited fields; whatever it does not consume is skipped.
template <class Handler>
bool walk(reader& r, std::string& reason, Handler&& on, std::uint64_t depth = 0,
          const field* group = nullptr) {
  if (depth > max_depth)
    return fail(reason, "groups nested deeper than ", max_depth, " at byte ",
                group ? group->at : r.pos());
  while (r.left() > 0) {
    field f{0, 0, 0, r.pos()};
    std::uint64_t tag;
    if (!read_varint(r, tag, reason)) return false;
    if (tag >> 3 == 0 || tag >> 3 > max_field_number)
      return fail(reason, "invalid field number ", tag >> 3, " at byte ", f.at);
    f.number = static_cast<std::uint32_t>(tag >> 3);
    f.type = static_cast<std::uint32_t>(tag & 7);
    switch (f.type) {
      case 0:
        if (!read_varint(r, f.value, reason)) return false;
        break;
      case 1:
      case 5: {
        std::size_t n = f.type == 1 ? 8 : 4;
        if (r.left() < n)
          return fail(reason, "truncated fixed field ", f.number, " at byte ", f.at);
        r.skip(n);
        continue;
      }
      case 2:
        if (!read_varint(r, f.value, reason)) return false;
        if (f.value > r.left())
          return fail(reason, "truncated length-delimited field ", f.number, " at byte ", f.at);
        break;
      case 3:
        if (!walk(r, reason, skip_field, depth + 1, &f)) return false;
        continue;
      case 4:
        if (group && group->number == f.number) return true;
        return fail(reason, "unmatched end-group for field ", f.number, " at byte ", f.at);
      default:
        return fail(reason, "invalid wire type ", f.type, " for field ", f.number, " at byte ",
                    f.at);
    }
    step s = on(r, f);
    if (s == step::fail) return false;
    if (s == step::skip && f.type == 2) r.skip(f.value);
  }
  if (group)
    return fail(reason, "unterminated group field ", group->number, " at byte ", group->at);
  return true;
}

/// Reads a length-delimited routing id, refusing one longer than max_id_bytes.
step read_id(reader& r, const field& f, std::string_view name, std::string& out,
             std::string& reason) {
  if (f.value > max_id_bytes) {
    fail(reason, name, " (field ", f.number, ") longer than ", max_id_bytes, " bytes at byte ",
         f.at);
    return step::fail;
  }
  r.copy(f.value, out);
  return step::done;
}

/// Walks a UserContext in place for its user_id (field 1).
step read_user_context(reader& r, const field& f, std::string& user_id, std::string& reason) {
  const std::size_t outer = r.limit();
  r.set_limit(r.pos() + f.value);
  bool ok = walk(
      r, reason,
      [&](reader& r, const field& g) {
        if (g.number != 1 || g.type != 2) return step::skip;
        return read_id(r, g, "user_id", user_id, reason);
      },
      1);
  r.set_limit(outer);
  if (ok) return step::done;
  reason.insert(0, "user_context (field 2): ");
  return step::fail;
}

}  // namespace


scan_result scan_request(rpc r, const segments& msg, request_fields& out) {
  out.session_id.clear();
  out.user_id.clear();
  out.operation_id.clear();
  out.observed_server_session.clear();
  out.new_session_id.clear();
  out.interrupt_type = 0;
  out.release_all = false;
  const request_layout& l = request_layouts[rpc_index(r)];
  scan_result res;
  reader rd(msg);
  // A known field number with an unexpected wire type is an unknown field, as in protobuf.
  auto on = [&](reader& rd, const field& f) {
    if (f.type == 0) {
      if (f.number == l.interrupt_type) out.interrupt_type = f.value;
      return step::done;
    }
    std::string& why = res.reason;
    if (f.number == 1) return read_id(rd, f, "session_id", out.session_id, why);
    if (f.number == 2) return read_user_context(rd, f, out.user_id, why);
    if (f.number == l.operation_id) return read_id(rd, f, "operation_id", out.operation_id, why);
    if (f.number == l.observed)
      return read_id(rd, f, "client_observed_server_side_session_id", out.observed_server_session,
                     why);
    if (f.number == l.new_session_id)
      return read_id(rd, f, "new_session_id", out.new_session_id, why);
    if (f.number == l.release_all) out.release_all = true;
    return step::skip;
  };
  res.ok = walk(rd, res.reason, on);
  return res;
}

scan_result scan_response(rpc r, const segments& msg, response_fields& out) {
  out.session_id.clear();
  out.server_side_session_id.clear();
  out.operation_id.clear();
  out.new_session_id.clear();
  out.new_server_side_session_id.clear();
  out.result_complete = false;
  const response_layout& l = response_layouts[rpc_index(r)];
  scan_result res;
  reader rd(msg);
  auto on = [&](reader& rd, const field& f) {
    if (f.type != 2) return step::skip;
    std::string& why = res.reason;
    if (f.number == l.session_id) return read_id(rd, f, "session_id", out.session_id, why);
    if (f.number == l.server_side)
      return read_id(rd, f, "server_side_session_id", out.server_side_session_id, why);
    if (f.number == l.operation_id) return read_id(rd, f, "operation_id", out.operation_id, why);
    if (f.number == l.new_session_id)
      return read_id(rd, f, "new_session_id", out.new_session_id, why);
    if (f.number == l.new_server_side)
      return read_id(rd, f, "new_server_side_session_id", out.new_server_side_session_id, why);
    if (f.number == l.result_complete) out.result_complete = true;
    return step::skip;
  };
  res.ok = walk(rd, res.reason, on);
  return res;
}

}  // namespace scg::net

#include "net/wire.hpp"

#include <algorithm>
#include <array>

#include "core/protowire.hpp"

namespace scg::net {
namespace {

using namespace core::protowire;  // the reader: reader, walk, step, fail
using field = walked;

/// Where an rpc's request keeps its routing fields; 0 means "not carried".
/// Fields 1 (session_id) and 2 (user_context) are common to every request.
struct request_layout {
  std::uint32_t operation_id, observed, new_session_id, interrupt_type, release_all, plan;
};
constexpr std::array<request_layout, rpc_count> request_layouts = {{
    {6, 8, 0, 0, 0, 3},   // ExecutePlan
    {0, 17, 0, 0, 0, 0},  // AnalyzePlan
    {0, 8, 0, 0, 0, 0},   // Config
    {0, 7, 0, 0, 0, 0},   // AddArtifacts
    {0, 5, 0, 0, 0, 0},   // ArtifactStatus
    {6, 7, 0, 4, 0, 0},   // Interrupt
    {3, 6, 0, 0, 0, 0},   // ReattachExecute
    {3, 7, 0, 0, 5, 0},   // ReleaseExecute
    {0, 0, 0, 0, 0, 0},   // ReleaseSession
    {0, 5, 0, 0, 0, 0},   // FetchErrorDetails
    {0, 5, 4, 0, 0, 0},   // CloneSession
    {0, 4, 0, 0, 0, 0},   // GetStatus
    {0, 0, 0, 0, 0, 0},   // unknown
}};

/// A member of Command's oneof (commands.proto) that may wait, and within
/// it the field that does: `sub` 0 means the whole member waits. `keep` is
/// the member's one field outside its own oneof (StreamingQueryCommand.query_id);
/// every other field of it is another oneof member, which computes.
struct waiting_member {
  std::uint32_t command, sub, sub_type, keep;
  plan_kind kind;
};
constexpr std::array<waiting_member, 5> waiting_members = {{
    {11, 0, 0, 0, plan_kind::listener_bus},           // StreamingQueryListenerBusCommand
    {7, 9, 2, 1, plan_kind::await_termination},       // StreamingQueryCommand.await_termination
    {7, 6, 0, 1, plan_kind::process_all_available},   // StreamingQueryCommand.process_all_available (bool)
    {9, 3, 2, 0, plan_kind::await_any_termination},   // StreamingQueryManagerCommand.await_any_termination
    {19, 7, 2, 0, plan_kind::pipeline_signals},       // PipelineCommand.get_query_function_execution_signal_stream
}};
constexpr std::uint32_t plan_command = 2;  // Plan.command; root (1) and compressed_operation (3) compute

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

/// Walks the message that is field `f`'s payload in place with `on`; false
/// when it is not a valid message (the reader then stops somewhere inside it).
template <class Handler>
bool walk_inside(reader& r, const field& f, std::uint64_t depth, Handler&& on) {
  const std::size_t outer = r.limit();
  r.set_limit(r.pos() + f.value);
  std::string reason;  // a plan's own faults are Spark's to report
  const bool ok = walk(r, reason, on, depth);
  r.set_limit(outer);
  return ok;
}

/// Classifies the Command that is field `f`'s payload. As in protobuf, the
/// last member of a oneof wins; an unexpected field makes it `compute`.
bool read_command(reader& r, const field& f, plan_kind& kind) {
  return walk_inside(r, f, 2, [&](reader& r, const field& c) {
    kind = plan_kind::compute;
    if (c.type != 2) return step::skip;
    const waiting_member* member = nullptr;
    for (const auto& m : waiting_members)
      if (m.command == c.number) {
        member = &m;
        break;
      }
    if (!member) return step::skip;
    if (member->sub == 0) {
      kind = member->kind;
      return step::skip;
    }
    const bool ok = walk_inside(r, c, 3, [&](reader&, const field& g) {
      if (g.number == member->keep) return step::skip;
      kind = plan_kind::compute;
      for (const auto& m : waiting_members)
        if (m.command == c.number && m.sub == g.number && m.sub_type == g.type) kind = m.kind;
      return step::skip;
    });
    return ok ? step::done : step::fail;
  });
}

/// Classifies ExecutePlanRequest.plan (field `f`) and moves past it; never fails.
step read_plan(reader& r, const field& f, plan_kind& kind) {
  const std::size_t end = r.pos() + f.value;
  plan_kind found = plan_kind::compute;
  const bool ok = walk_inside(r, f, 1, [&](reader& r, const field& p) {
    found = plan_kind::compute;
    if (p.number != plan_command || p.type != 2) return step::skip;
    return read_command(r, p, found) ? step::done : step::fail;
  });
  kind = ok ? found : plan_kind::compute;
  if (r.pos() < end) r.skip(end - r.pos());
  return step::done;
}

}  // namespace

std::string_view plan_kind_name(plan_kind k) {
  switch (k) {
    case plan_kind::compute: return "compute";
    case plan_kind::listener_bus: return "listener_bus";
    case plan_kind::await_termination: return "await_termination";
    case plan_kind::process_all_available: return "process_all_available";
    case plan_kind::await_any_termination: return "await_any_termination";
    case plan_kind::pipeline_signals: return "pipeline_signals";
  }
  return "compute";
}

scan_result scan_request(rpc r, const segments& msg, request_fields& out) {
  out.session_id.clear();
  out.user_id.clear();
  out.operation_id.clear();
  out.observed_server_session.clear();
  out.new_session_id.clear();
  out.interrupt_type = 0;
  out.release_all = false;
  out.plan = plan_kind::compute;
  const request_layout& l = request_layouts[rpc_index(r)];
  scan_result res;
  reader rd(msg.data(), msg.size());
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
    if (f.number == l.plan) return read_plan(rd, f, out.plan);
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
  reader rd(msg.data(), msg.size());
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

void arrow_rows_reader::start(std::uint64_t length) {
  state_ = length > 0 ? state::tag : state::done;
  nested_ = false;
  varint_ = 0;
  shift_ = 0;
  pos_ = 0;
  end_ = length;
  rows_ = 0;
}

void arrow_rows_reader::on_varint(std::uint64_t v) {
  switch (state_) {
    case state::tag:
      field_ = static_cast<std::uint32_t>(v >> 3);
      type_ = static_cast<std::uint32_t>(v & 7);
      if (type_ == 0) state_ = state::value;
      else if (type_ == 2) state_ = state::length;
      else if (type_ == 1 || type_ == 5) skip_ = type_ == 1 ? 8 : 4, state_ = state::skip;
      else state_ = state::done;  // groups: not in these messages
      return;
    case state::value:
      if (nested_ && field_ == 1) {
        rows_ = v;
        state_ = state::done;  // all it came for
        return;
      }
      state_ = state::tag;
      return;
    case state::length:
      if (!nested_ && field_ == 2) {  // arrow_batch: read inside it
        nested_ = true;
        nested_end_ = pos_ + v;
        state_ = state::tag;
        return;
      }
      skip_ = v;
      state_ = state::skip;
      return;
    default:
      return;
  }
}

void arrow_rows_reader::feed(const std::uint8_t* data, std::size_t size) {
  std::size_t i = 0;
  while (i < size && state_ != state::done) {
    if (state_ == state::skip) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(skip_, size - i));
      i += n;
      pos_ += n;
      skip_ -= n;
      if (skip_ == 0) state_ = state::tag;
    } else {
      const std::uint8_t b = data[i++];
      ++pos_;
      if (shift_ >= 64) {
        state_ = state::done;
        break;
      }
      varint_ |= std::uint64_t{b & 0x7fu} << shift_;
      shift_ += 7;
      if (b & 0x80) continue;
      const auto v = varint_;
      varint_ = 0;
      shift_ = 0;
      on_varint(v);
    }
    // Leaving arrow_batch without a row_count: nothing more to find.
    if (nested_ && state_ == state::tag && pos_ >= nested_end_) state_ = state::done;
    if (pos_ >= end_ && state_ != state::done) state_ = state::done;
  }
}

std::uint32_t observed_field(rpc r) { return request_layouts[static_cast<std::size_t>(r)].observed; }

std::uint32_t server_side_field(rpc r) { return response_layouts[static_cast<std::size_t>(r)].server_side; }

bool overwrite_id(const segments& msg, std::uint32_t number, std::string_view from, std::string_view to) {
  if (number == 0 || from.size() != to.size() || from.empty()) return false;
  reader r(msg.data(), msg.size());
  std::string reason, value;
  while (r.left() > 0) {
    field f;
    if (read_field(r, f, reason, 0, nullptr) != met::field) return false;
    if (f.type != 2) continue;
    if (f.value > r.left()) return false;
    const auto at = r.pos();
    if (f.number != number || f.value != from.size()) {
      r.skip(f.value);
      continue;
    }
    r.copy(f.value, value);
    if (value != from) continue;
    // Write `to` over the value, which may cross segments.
    std::size_t base = 0, done = 0;
    for (const auto& s : msg) {
      for (; done < to.size() && at + done < base + s.size; ++done)
        const_cast<std::uint8_t*>(s.data)[at + done - base] = static_cast<std::uint8_t>(to[done]);
      base += s.size;
      if (done == to.size()) break;
    }
    return true;
  }
  return false;
}

}  // namespace scg::net

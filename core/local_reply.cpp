#include "core/local_reply.hpp"

#include "core/metrics.hpp"
#include "core/protowire.hpp"

#include <algorithm>

namespace scg::core {

const std::array<local_reply, local_reason_count>& local_replies() {
  static const std::array<local_reply, local_reason_count> rows{{
#define SCG_REASON_ROW(name, code, level, retry, counter, what) \
  {local_reason::name, #name, grpc_code::code, reply_level::level, retry, &metrics::counter, what},
      SCG_LOCAL_REPLIES(SCG_REASON_ROW)
#undef SCG_REASON_ROW
  }};
  return rows;
}

void count_local_reply(local_reason r) {
  auto& m = global_metrics();
  bump(m.local_replies[static_cast<std::size_t>(r)]);
  bump(m.*reply_of(r).counter);
}

local_reason reason_of_reset(std::uint32_t http2_error, bool connection_failed) {
  if (connection_failed) return local_reason::backend_broke_off;
  switch (http2_error) {  // RFC 9113 section 7 codes
    case 0x7: return local_reason::backend_refused_stream;
    case 0x8: return local_reason::backend_cancelled;
    case 0xb: return local_reason::backend_calm;
    case 0xc: return local_reason::backend_insecure;
    default: return local_reason::backend_reset;
  }
}

std::optional<int> parse_grpc_status(std::string_view value) {
  if (value.empty() || value.size() > 2) return std::nullopt;
  int code = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    code = code * 10 + (c - '0');
  }
  return code <= 16 ? std::optional<int>(code) : std::nullopt;
}

std::string retry_status_details(int code, std::string_view message,
                                 std::chrono::milliseconds delay) {
  using namespace protowire;
  // google.protobuf.Duration {seconds = 1, nanos = 2} inside RetryInfo {retry_delay = 1}.
  std::string duration;
  const long long ms = std::max<long long>(0, delay.count());
  if (ms / 1000 != 0) put_uint(duration, 1, static_cast<std::uint64_t>(ms / 1000));
  if (ms % 1000 != 0) put_uint(duration, 2, static_cast<std::uint64_t>(ms % 1000 * 1000000));
  std::string retry_info;
  put_bytes(retry_info, 1, duration);
  // google.protobuf.Any {type_url = 1, value = 2}.
  std::string any;
  put_bytes(any, 1, "type.googleapis.com/google.rpc.RetryInfo");
  put_bytes(any, 2, retry_info);
  // google.rpc.Status {code = 1, message = 2, details = 3}.
  std::string status;
  if (code != 0) put_uint(status, 1, static_cast<std::uint64_t>(code));
  if (!message.empty()) put_bytes(status, 2, message);
  put_bytes(status, 3, any);
  return status;
}

}  // namespace scg::core

#include "core/tracing.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <random>

#include "core/metrics.hpp"

namespace scg::core {
namespace {

/// The value of a lowercase hex digit, -1 for anything else (uppercase too:
/// the W3C spec allows lowercase only).
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/// Reads 2·N hex digits of `s` from `at` into `out`; false on a bad digit.
template <std::size_t N>
bool read_hex(std::string_view s, std::size_t at, std::array<std::uint8_t, N>& out) {
  for (std::size_t i = 0; i < N; ++i) {
    int hi = hex_digit(s[at + 2 * i]), lo = hex_digit(s[at + 2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& id) {
  for (auto b : id)
    if (b != 0) return false;
  return true;
}

std::mt19937_64& generator() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen;
}

template <std::size_t N>
std::array<std::uint8_t, N> random_id() {
  std::array<std::uint8_t, N> id{};
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      auto v = generator()();
      for (std::size_t j = 0; j < 8 && i + j < N; ++j) id[i + j] = static_cast<std::uint8_t>(v >> (8 * j));
    }
  } while (all_zero(id));
  return id;
}

nlohmann::json string_attribute(const std::string& key, const std::string& value) {
  return {{"key", key}, {"value", {{"stringValue", value}}}};
}

}  // namespace

// Layout: version "-" trace-id "-" parent-id "-" flags, 2+1+32+1+16+1+2 = 55.
std::optional<trace_parent> parse_traceparent(std::string_view h) {
  constexpr std::size_t size = 55;
  if (h.size() < size || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  std::array<std::uint8_t, 1> version{}, flags{};
  if (!read_hex(h, 0, version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later one may append "-…" fields.
  if (h.size() > size && (version[0] == 0 || h[size] != '-')) return std::nullopt;
  trace_parent tp;
  if (!read_hex(h, 3, tp.trace) || !read_hex(h, 36, tp.span) || !read_hex(h, 53, flags)) return std::nullopt;
  if (all_zero(tp.trace) || all_zero(tp.span)) return std::nullopt;
  tp.flags = flags[0];
  return tp;
}

std::string format_traceparent(const trace_parent& tp) {
  return "00-" + to_hex(tp.trace) + "-" + to_hex(tp.span) + "-" + to_hex(&tp.flags, 1);
}

trace_id new_trace_id() { return random_id<16>(); }
span_id new_span_id() { return random_id<8>(); }

std::string to_hex(const std::uint8_t* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string otlp_json(const std::vector<span>& spans, const std::string& service_name) {
  auto out = nlohmann::json::array();
  for (const auto& s : spans) {
    auto attributes = nlohmann::json::array();
    for (const auto& [k, v] : s.attributes) attributes.push_back(string_attribute(k, v));
    // OTLP's JSON encoding writes 64-bit integers as strings.
    attributes.push_back(
        {{"key", "rpc.grpc.status_code"}, {"value", {{"intValue", std::to_string(s.grpc_status_code)}}}});
    nlohmann::json j = {{"traceId", to_hex(s.trace)},
                        {"spanId", to_hex(s.id)},
                        {"name", s.name},
                        {"kind", 2},  // SPAN_KIND_SERVER
                        {"startTimeUnixNano", std::to_string(s.start_unix_ns)},
                        {"endTimeUnixNano", std::to_string(s.end_unix_ns)},
                        {"attributes", std::move(attributes)},
                        {"status", {{"code", s.error ? 2 : 1}}}};  // STATUS_CODE_ERROR : STATUS_CODE_OK
    if (s.parent) j["parentSpanId"] = to_hex(*s.parent);
    out.push_back(std::move(j));
  }
  nlohmann::json body = {
      {"resourceSpans",
       {{{"resource", {{"attributes", {string_attribute("service.name", service_name)}}}},
         {"scopeSpans", {{{"scope", {{"name", "scg"}}}, {"spans", std::move(out)}}}}}}}};
  return body.dump();
}

}  // namespace scg::core

#include "core/session_key.hpp"

namespace scg::core {

namespace {

/// Reads one "LEN:" prefixed part of a key at `pos`; false when malformed.
bool read_part(std::string_view s, std::size_t& pos, std::string& part) {
  auto colon = s.find(':', pos);
  if (colon == std::string_view::npos || colon == pos || colon - pos > 9) return false;
  std::size_t len = 0;
  for (auto i = pos; i < colon; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    len = len * 10 + static_cast<std::size_t>(s[i] - '0');
  }
  if (len > s.size() - colon - 1) return false;
  part.assign(s.substr(colon + 1, len));
  pos = colon + 1 + len;
  return true;
}

}  // namespace

std::string session_key::str() const {
  std::string out;
  out.reserve(tenant.size() + user_id.size() + session_id.size() + 12);
  for (const std::string* part : {&tenant, &user_id, &session_id}) {
    out += std::to_string(part->size());
    out += ':';
    out += *part;
  }
  return out;
}

std::optional<session_key> session_key::parse(std::string_view s) {
  session_key k;
  std::size_t pos = 0;
  for (std::string* part : {&k.tenant, &k.user_id, &k.session_id})
    if (!read_part(s, pos, *part)) return std::nullopt;
  if (pos != s.size()) return std::nullopt;
  return k;
}

}  // namespace scg::core

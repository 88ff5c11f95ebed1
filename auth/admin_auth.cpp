#include "auth/admin_auth.hpp"

#include <cctype>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "config/config.hpp"
#include "core/file.hpp"

namespace scg::auth {
namespace {

std::string sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool visible_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return !s.empty();
}

}  // namespace

std::string_view to_string(admin_role r) {
  switch (r) {
    case admin_role::read: return "read";
    case admin_role::admin: return "admin";
    default: return "none";
  }
}

std::optional<std::string_view> bearer_token(std::optional<std::string_view> header) {
  if (!header) return std::nullopt;
  std::string_view h = *header;
  constexpr std::string_view scheme = "bearer ";
  if (h.size() <= scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (static_cast<char>(std::tolower(static_cast<unsigned char>(h[i]))) != scheme[i]) return std::nullopt;
  h.remove_prefix(scheme.size());
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
  if (h.empty()) return std::nullopt;
  return h;
}

std::vector<std::string> tokens_of_file(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    auto end = text.find('\n');
    auto line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (visible_ascii(line)) out.emplace_back(line);
  }
  return out;
}

void admin_tokens::set(const std::vector<std::string>& admin, const std::vector<std::string>& read) {
  auto next = std::make_shared<std::vector<entry>>();
  for (auto [role, list] : {std::pair{admin_role::admin, &admin}, std::pair{admin_role::read, &read}})
    for (const auto& t : *list) {
      auto d = sha256(t);
      next->push_back({d, {role, std::string(to_string(role)) + ":" + hex(d).substr(0, 8)}});
    }
  std::lock_guard lock{mutex_};
  entries_ = std::move(next);
}

bool admin_tokens::configured(admin_role at_least) const {
  std::shared_ptr<const std::vector<entry>> e;
  {
    std::lock_guard lock{mutex_};
    e = entries_;
  }
  for (const auto& x : *e)
    if (x.caller.role >= at_least) return true;
  return false;
}

admin_caller admin_tokens::find(std::string_view token) const {
  std::shared_ptr<const std::vector<entry>> e;
  {
    std::lock_guard lock{mutex_};
    e = entries_;
  }
  const auto digest = sha256(token);
  admin_caller found;
  // Every entry is compared, so the time does not tell which one matched.
  for (const auto& x : *e)
    if (CRYPTO_memcmp(digest.data(), x.digest.data(), digest.size()) == 0 && x.caller.role > found.role)
      found = x.caller;
  return found;
}

std::string admin_tokens::fingerprint() const {
  std::lock_guard lock{mutex_};
  std::string all;
  for (const auto& x : *entries_) all += x.caller.id + ",";
  return all;
}

std::optional<config::error> load_admin_tokens(const config::admin_plane& plane, admin_tokens& tokens) {
  std::vector<std::string> found[2];
  const std::pair<const char*, const std::string*> files[2] = {{"admin.token_file", &plane.token_file},
                                                               {"admin.read_token_file", &plane.read_token_file}};
  for (int i = 0; i < 2; ++i) {
    const auto& [field, path] = files[i];
    if (path->empty()) continue;
    std::string why;
    auto text = core::read_file(*path, why, 64 * 1024);
    if (!text) return config::error{field, why};
    found[i] = tokens_of_file(*text);
    if (found[i].empty())
      return config::error{field, "\"" + *path + "\" holds no token (one per line, visible ASCII)"};
  }
  tokens.set(found[0], found[1]);
  return std::nullopt;
}

}  // namespace scg::auth

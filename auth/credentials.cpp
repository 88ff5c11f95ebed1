#include "auth/credentials.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "config/yaml_read.hpp"
#include "core/file.hpp"

namespace scg::auth {

using config::yaml::in_quotes;

std::variant<std::string, config::error> resolve_secret(const secret_ref& ref) {
  std::string out;
  switch (ref.kind) {
    case secret_ref::source::inline_value:
      out = ref.value;
      break;
    case secret_ref::source::env: {
      const char* v = std::getenv(ref.value.c_str());
      if (!v)
        return config::error{ref.field,
                             "environment variable " + in_quotes(ref.value) + " is not set"};
      out = v;
      break;
    }
    case secret_ref::source::file: {
      std::string why;
      auto text = core::read_file(ref.value, why, 1u << 20);
      if (!text) return config::error{ref.field, why};
      out = std::move(*text);
      // Secret files written by editors and `echo` end in a newline that is not part of the secret.
      if (!out.empty() && out.back() == '\n') out.pop_back();
      if (!out.empty() && out.back() == '\r') out.pop_back();
      break;
    }
  }
  if (out.empty()) return config::error{ref.field, "the secret is empty"};
  return out;
}

const std::string& backend_credentials::for_tenant(std::string_view tenant) const {
  auto it = per_tenant.find(tenant);
  return it == per_tenant.end() ? default_token : it->second;
}

std::variant<backend_credentials, config::error> resolve_backend_tokens(const security_config& s) {
  auto read = [](const secret_ref& ref, std::string& out) -> std::optional<config::error> {
    auto v = resolve_secret(ref);
    if (auto* e = std::get_if<config::error>(&v)) return *e;
    out = std::get<std::string>(std::move(v));
    for (char c : out)
      if (c < 0x21 || c > 0x7e)
        return config::error{ref.field, "the token contains characters not allowed in a header"};
    return std::nullopt;
  };
  backend_credentials c;
  if (s.backend_token)
    if (auto e = read(*s.backend_token, c.default_token)) return *e;
  for (const auto& [tenant, ref] : s.tenants.backend_tokens)
    if (auto e = read(ref, c.per_tenant[tenant])) return *e;
  return c;
}

std::string spark_user_id(std::string_view tenant, std::string_view user, std::string_view default_tenant) {
  if (tenant == default_tenant && user.find(':') == std::string_view::npos) return std::string(user);
  std::string out;
  out.reserve(tenant.size() + 1 + user.size());
  out.append(tenant).append(1, ':').append(user);
  return out;
}

}  // namespace scg::auth

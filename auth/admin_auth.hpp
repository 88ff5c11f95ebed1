#pragma once
// Who may use the admin plane: the admin and read-only tokens (files named by
// admin.token_file and admin.read_token_file, read at startup and again on
// SIGHUP and every reload.watch_secs), checked in constant time. Pure: the
// server (admin/admin_http.cpp) asks, this answers.

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace scg::config {
struct admin_plane;
struct error;
}  // namespace scg::config

namespace scg::auth {

/// What a caller may do: read covers the listings, admin also the changes.
enum class admin_role { none, read, admin };

std::string_view to_string(admin_role r);  ///< "none" | "read" | "admin"

/// The token of "Bearer <token>" (scheme case-insensitive, RFC 6750 §2.1);
/// nullopt when the header is absent, of another scheme or empty.
std::optional<std::string_view> bearer_token(std::optional<std::string_view> header);

/// The tokens of a token file: each non-empty line, trimmed of blanks and a
/// CR (two lines while a token is rotated). Lines with anything but visible
/// ASCII are left out (a token travels in a header).
std::vector<std::string> tokens_of_file(std::string_view text);

/// A caller the tokens recognised.
struct admin_caller {
  admin_role role = admin_role::none;
  std::string id;  ///< "ROLE:FINGERPRINT" (8 hex digits of the token's SHA-256): names, never shows, the token
};

/// The configured tokens by role. Thread-safe: set() replaces them whole
/// while find() runs on the admin threads.
class admin_tokens {
 public:
  /// Replaces every token; an empty list leaves that role without one.
  void set(const std::vector<std::string>& admin, const std::vector<std::string>& read);

  /// Whether any token gives `at_least` (admin tokens give read too).
  bool configured(admin_role at_least) const;

  /// The caller presenting `token`, role none when it matches no token.
  /// Compares SHA-256 digests with CRYPTO_memcmp: one length, constant time.
  admin_caller find(std::string_view token) const;

  /// A fingerprint of the current tokens (to log a reload only when they changed).
  std::string fingerprint() const;

 private:
  struct entry {
    std::string digest;
    admin_caller caller;
  };
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<entry>> entries_ = std::make_shared<std::vector<entry>>();
};

/// Reads admin.token_file and admin.read_token_file into `tokens` (each
/// optional). A file that cannot be read or holds no token is an error
/// naming the field, and `tokens` is left as it was; nullopt when set.
std::optional<config::error> load_admin_tokens(const config::admin_plane& plane, admin_tokens& tokens);

}  // namespace scg::auth

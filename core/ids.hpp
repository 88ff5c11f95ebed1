#pragma once
// Random identifiers (request ids).

#include <string>

namespace scg::core {

/// 32 lowercase hex digits from a per-thread random generator seeded once from
/// the OS; unique enough for correlating log lines, not a secret.
std::string new_request_id();

}  // namespace scg::core

#pragma once
// Random identifiers (request ids).

#include <string>

namespace scg::core {

/// 32 lowercase hex digits from a per-thread random generator seeded once from
/// the OS; unique enough for correlating log lines, not a secret.
std::string new_request_id();

/// A random version-4 UUID in its 8-4-4-4-12 form (Spark's operation and
/// session ids must be UUIDs).
std::string new_uuid();

}  // namespace scg::core

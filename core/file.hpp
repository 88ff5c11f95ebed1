#pragma once
// Reading a whole file (configs, keys, secrets, tokens), with the error
// message every caller gives.

#include <cstddef>
#include <limits>
#include <optional>
#include <string>

namespace scg::core {

/// The contents of `path`, at most about `max_bytes` (reading stops past
/// it); nullopt with `why` set to "cannot open \"PATH\": REASON" or "cannot
/// read \"PATH\": REASON" when it cannot be read.
std::optional<std::string> read_file(const std::string& path, std::string& why,
                                     std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

}  // namespace scg::core

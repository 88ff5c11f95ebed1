#pragma once
// Log lines as JSON: every scg log message has one shape,
//   EVENT key=value key="quoted value" …
// and in JSON format (the default) each line becomes one object,
//   {"ts": …, "level": …, "logger": …, "event": EVENT, "key": "value", …}.
// Messages that already are JSON objects (the audit trail) are merged as is.

#include <string>
#include <string_view>

namespace scg::core {

/// The JSON members (without braces, comma-separated) for message `msg`:
/// "event":"EVENT","key":"value",…; a message that is a JSON object gives its
/// members unchanged. Invalid UTF-8 is replaced, never thrown on.
std::string message_members(std::string_view msg);

/// How log lines are written (config `logging.format`).
enum class log_format {
  json,  ///< one object per line, UTC timestamps
  text,  ///< the message as written, after time, level and logger
};

/// Sets every registered spdlog logger's format.
void set_log_format(log_format format);

}  // namespace scg::core

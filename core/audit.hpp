#pragma once
// The audit trail: one JSON object per line on the "audit" logger, for the
// events an operator must be able to reconstruct (who got which server, who
// was refused and why). Never tokens, never plans.

#include <initializer_list>
#include <string_view>
#include <utility>

namespace scg::core {

using audit_field = std::pair<std::string_view, std::string_view>;

/// Writes {"event": EVENT, FIELD: VALUE, …} to the audit logger. Empty
/// values are left out.
void audit(std::string_view event, std::initializer_list<audit_field> fields);

}  // namespace scg::core

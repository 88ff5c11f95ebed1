#include "core/audit.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace scg::core {

void audit(std::string_view event, std::initializer_list<audit_field> fields) {
  static const auto log = spdlog::get("audit");
  if (!log) return;
  nlohmann::ordered_json line{{"event", event}};
  for (const auto& [key, value] : fields)
    if (!value.empty()) line[std::string(key)] = value;
  // Ids come from clients: replace invalid UTF-8 rather than throw.
  log->info(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

}  // namespace scg::core

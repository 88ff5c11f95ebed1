#include "admin/status_page.hpp"

namespace scg::admin {

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

const ui_file* find_ui_file(std::string_view name) {
  for (std::size_t i = 0; i < ui_file_count; ++i)
    if (ui_files[i].name == name) return &ui_files[i];
  return nullptr;
}

std::string_view ui_content_type(std::string_view name) {
  if (ends_with(name, ".html")) return "text/html; charset=utf-8";
  if (ends_with(name, ".js")) return "text/javascript; charset=utf-8";
  if (ends_with(name, ".css")) return "text/css; charset=utf-8";
  if (ends_with(name, ".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace scg::admin

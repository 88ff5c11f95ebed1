#include "core/prometheus.hpp"

namespace scg::core {

std::string prometheus_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

prometheus_writer& prometheus_writer::family(std::string_view name, std::string_view help, std::string_view type) {
  name_ = name;
  out_ += "# HELP scg_";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE scg_";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
  return *this;
}

}  // namespace scg::core

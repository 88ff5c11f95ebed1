#pragma once
// The one writer of Prometheus text (exposition format 0.0.4) for /metrics:
// a family's HELP and TYPE lines once, then its samples, every name with
// scg's prefix and every label value escaped. Values are written as
// std::to_string writes them, so the text does not depend on the writer's
// caller.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace scg::core {

/// A label value escaped as the format requires (backslash, quote, newline).
std::string prometheus_label(std::string_view v);

class prometheus_writer {
 public:
  using label = std::pair<std::string_view, std::string_view>;  ///< name, raw value
  using labels = std::initializer_list<label>;

  explicit prometheus_writer(std::string& out) : out_(out) {}

  /// Starts the family `name` (without "scg_"): its HELP and TYPE lines.
  /// `type`: counter, gauge or histogram.
  prometheus_writer& family(std::string_view name, std::string_view help, std::string_view type);

  /// A sample of the family last started.
  void sample(labels ls, std::string_view value) { series("", ls, value); }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  void sample(labels ls, T value) {
    sample(ls, std::string_view(std::to_string(value)));
  }
  void sample(std::string_view value) { sample({}, value); }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  void sample(T value) {
    sample({}, value);
  }

  /// A sample of the family last started whose name has `suffix`
  /// (a histogram's "_bucket", "_sum", "_count"); `ls` may be a pre-built list.
  template <class Labels>
  void series(std::string_view suffix, const Labels& ls, std::string_view value) {
    out_ += "scg_";
    out_ += name_;
    out_ += suffix;
    char sep = '{';
    for (const auto& [k, v] : ls) {
      out_ += sep;
      out_ += k;
      out_ += "=\"";
      out_ += prometheus_label(v);
      out_ += '"';
      sep = ',';
    }
    if (sep == ',') out_ += '}';
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }
  void series(std::string_view suffix, labels ls, std::string_view value) {
    series<labels>(suffix, ls, value);
  }

 private:
  std::string& out_;
  std::string name_;
};

}  // namespace scg::core

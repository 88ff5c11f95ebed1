#include "core/log_format.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

namespace scg::core {
namespace {

/// Reads a value at `pos`: "quoted" (with \" and \\ escapes) or up to the next space.
std::string read_value(std::string_view msg, std::size_t& pos) {
  std::string out;
  if (pos < msg.size() && msg[pos] == '"') {
    for (++pos; pos < msg.size() && msg[pos] != '"'; ++pos) {
      if (msg[pos] == '\\' && pos + 1 < msg.size()) ++pos;
      out += msg[pos];
    }
    ++pos;  // the closing quote
  } else {
    while (pos < msg.size() && msg[pos] != ' ') out += msg[pos++];
  }
  return out;
}

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

/// The `%*` flag: the message as JSON members.
class members_flag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    auto members = message_members(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(members.data(), members.data() + members.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<members_flag>(); }
};

}  // namespace

std::string message_members(std::string_view msg) {
  if (!msg.empty() && msg.front() == '{') {
    auto j = nlohmann::ordered_json::parse(msg, nullptr, false);
    if (j.is_object() && !j.empty()) {
      auto text = dump(j);
      return text.substr(1, text.size() - 2);
    }
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  std::size_t pos = msg.find(' ');
  j["event"] = std::string(msg.substr(0, pos));
  std::string rest;  // words that are not key=value stay readable under "text"
  while (pos != std::string_view::npos && pos < msg.size()) {
    while (pos < msg.size() && msg[pos] == ' ') ++pos;
    if (pos >= msg.size()) break;
    auto eq = msg.find('=', pos);
    auto space = msg.find(' ', pos);
    if (eq == std::string_view::npos || (space != std::string_view::npos && space < eq)) {
      auto end = space == std::string_view::npos ? msg.size() : space;
      rest += (rest.empty() ? "" : " ") + std::string(msg.substr(pos, end - pos));
      pos = end;
      continue;
    }
    std::string key(msg.substr(pos, eq - pos));
    pos = eq + 1;
    j[key] = read_value(msg, pos);
  }
  if (!rest.empty()) j["text"] = rest;
  auto text = dump(j);
  return text.substr(1, text.size() - 2);
}

void set_log_format(log_format format) {
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& logger) {
    if (format == log_format::text) {
      logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %n %v");
      return;
    }
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<members_flag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n",%*})");
    logger->set_formatter(std::move(formatter));
  });
}

}  // namespace scg::core

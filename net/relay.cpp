#include "net/relay.hpp"

#include <algorithm>

namespace scg::net {

segments held_message::body() const {
  segments out;
  std::size_t skip = 5;
  bytes.for_each([&](const h2::slice& s) {
    const auto from = std::min(skip, s.size());
    skip -= from;
    if (from < s.size())
      out.push_back({reinterpret_cast<const std::uint8_t*>(s.data()) + from, s.size() - from});
  });
  return out;
}

std::string held_message::flat_body() const {
  std::string out;
  out.reserve(header.length);
  for (const auto& seg : body()) out.append(reinterpret_cast<const char*>(seg.data), seg.size);
  return out;
}

held_message share(const held_message& msg) {
  held_message m;
  m.header = msg.header;
  msg.bytes.for_each([&](const h2::slice& s) { m.bytes.push(s, false); });
  return m;
}

held_message message_of(std::string_view body, const held_message& original) {
  held_message m;
  m.header.length = static_cast<std::uint32_t>(body.size());
  m.bytes.push_owing(h2::slice::copy_of(h2::message_prefix(body.size()) + std::string(body)), original.bytes.owed());
  return m;
}

bool message_reader::readable() {
  if (!loaded_) {
    loaded_ = true;
    if (msg_.header.compressed && !text_) {
      auto inflated = h2::inflate(encoding_, msg_.flat_body(), limit_, &too_large_);
      if (inflated) text_ = std::move(*inflated);
      else failed_ = true;
    }
  }
  return !failed_;
}

segments message_reader::view() {
  if (!readable()) return {};
  if (!text_) return msg_.body();
  return {{reinterpret_cast<const std::uint8_t*>(text_->data()), text_->size()}};
}

const std::string& message_reader::text() {
  static const std::string none;
  if (!readable()) return none;
  if (!text_) text_ = msg_.flat_body();
  return *text_;
}

}  // namespace scg::net

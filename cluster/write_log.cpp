#include "cluster/write_log.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_set>

namespace scg::cluster {

void write_log::add(std::string key, std::int64_t wall_ms) {
  if (capacity_ == 0) {
    dropped_up_to_ = std::max(dropped_up_to_, wall_ms);
    return;
  }
  if (items_.size() == capacity_) {
    dropped_up_to_ = std::max(dropped_up_to_, items_.front().first);
    items_.pop_front();
  }
  items_.emplace_back(wall_ms, std::move(key));
}

std::optional<std::vector<std::string>> write_log::since(std::int64_t since_ms) const {
  if (dropped_up_to_ >= since_ms) return std::nullopt;
  // Newest first, so a key written several times is taken at its last write.
  std::unordered_set<std::string_view> seen;
  std::vector<std::string> out;
  for (auto it = items_.rbegin(); it != items_.rend() && it->first >= since_ms; ++it)
    if (seen.insert(it->second).second) out.push_back(it->second);
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace scg::cluster

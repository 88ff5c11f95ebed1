#pragma once
// What the admin API shows of the cluster; written by the cluster actor,
// read by HTTP threads.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace scg::cluster {

struct member_info {
  std::string name;
  std::string address;
  std::string status;  ///< "up" | "down"
  std::int64_t last_seen_ms = 0;  ///< wall clock of the last message from it; 0 never
  std::int64_t lag_ms = 0;        ///< age of its newest entry when it arrived here
  std::uint32_t protocol = 1;     ///< the newest cluster protocol it speaks (1: v0.1.0, no versioned hello)
  std::string scg_version;        ///< as it announced it; "" when it did not (protocol 1)
  bool owner = false;             ///< up and its first sync over: it owns keys here (self: this replica's own)
};

/// A snapshot the cluster actor replaces whole.
class cluster_view {
 public:
  void set(std::vector<member_info> members, std::uint64_t conflicts, bool synced) {
    std::lock_guard lock{mu_};
    members_ = std::move(members);
    conflicts_ = conflicts;
    synced_ = synced;
  }
  std::vector<member_info> members() const {
    std::lock_guard lock{mu_};
    return members_;
  }
  std::uint64_t conflicts() const {
    std::lock_guard lock{mu_};
    return conflicts_;
  }
  bool synced() const {
    std::lock_guard lock{mu_};
    return synced_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<member_info> members_;
  std::uint64_t conflicts_ = 0;
  bool synced_ = false;
};

}  // namespace scg::cluster

#include "cluster/repair_packer.hpp"

#include <algorithm>

namespace scg::cluster {

void repair_packer::step(const replicated_table& t) {
  auto pack = [&](const entry_view& e) { add(e); };
  for (std::size_t looked = 0; !ready() && looked < slots_per_step;) {
    const auto& p = parts_[next_];
    if (slot_ > 0 && t.bucket_moves(p.bucket) != moves_) {
      slot_ = 0;
      ++restarts_;
      ++total_restarts_;
    }
    moves_ = t.bucket_moves(p.bucket);
    const auto slots = restarts_ >= max_restarts ? t.bucket_slots(p.bucket) : slots_at_a_time;
    slot_ = t.for_each_in_slots(p.bucket, p.subs, slot_, slots, pack);
    looked += std::max<std::size_t>(slots, 1);
    if (slot_ >= t.bucket_slots(p.bucket)) {
      ++next_;
      slot_ = 0;
      restarts_ = 0;
    }
  }
}

packed_entries repair_packer::take() {
  packed_entries out;
  if (!packed_.empty()) {
    out = std::move(packed_.front());
    packed_.pop_front();
  }
  return out;
}

}  // namespace scg::cluster

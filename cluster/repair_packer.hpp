#pragma once
// The messages of a repair, packed a step at a time: a sync of a million
// bindings packs 64 buckets of about 15,600 entries, and a step that packed
// a bucket whole (4 to 13 ms) kept the routers' questions to the cluster
// actor waiting that long. Pure, no actors (tests/unit/repair_packer_test.cpp);
// the cluster actor takes one message per step (cluster/sync.cpp, repair_step).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "cluster/packed_entries.hpp"
#include "cluster/replicated_table.hpp"

namespace scg::cluster {

class repair_packer {
 public:
  /// Bucket slots looked at per call of the table (a packed message of
  /// 4096 entries spans 5,500 to 11,000 of a bucket sent whole), and per step.
  static constexpr std::size_t slots_at_a_time = 1024;
  static constexpr std::size_t slots_per_step = 32 * 1024;
  /// Restarts of a part whose entries moved, after which it is packed whole.
  static constexpr int max_restarts = 2;

  /// A repair of `parts` of the table in messages of `chunk` entries at most.
  explicit repair_packer(std::vector<bucket_part> parts, std::size_t chunk)
      : parts_(std::move(parts)), chunk_(chunk) {}

  /// Appends `e` to the messages (a handoff's entries, packed beforehand).
  template <class Entry>
  void add(const Entry& e) {
    if (packed_.empty() || packed_.back().count == chunk_) packed_.emplace_back();
    packed_.back().add(e);
  }

  /// Packs the parts on from where the last step left them until a message
  /// of `chunk` entries is ready, every part is packed, or slots_per_step
  /// slots were looked at. Between steps the table may change: an entry
  /// written meanwhile is the caller's to send (as a delta), and a part
  /// whose bucket's entries moved (a growth, a removal) starts over, which
  /// sends again what it sent (a merge of an entry the peer holds changes
  /// nothing); after max_restarts it is packed whole.
  void step(const replicated_table& t);

  /// Whether a message can be taken: one of `chunk` entries, or the rest.
  bool ready() const {
    return packed_.size() > 1 || (!packed_.empty() && packed_.front().count == chunk_) || parts_done();
  }
  /// The next message (empty when none is left: a table that agrees sends one).
  packed_entries take();
  /// Whether take() has taken everything.
  bool done() const { return packed_.empty() && parts_done(); }
  /// Times a part started over (its bucket's entries moved).
  std::uint64_t restarts() const { return total_restarts_; }

 private:
  bool parts_done() const { return next_ == parts_.size(); }

  std::vector<bucket_part> parts_;
  std::size_t chunk_;
  std::size_t next_ = 0, slot_ = 0;  // the part being packed; where in its bucket
  std::uint64_t moves_ = 0;          // that bucket's moves when slot_ was reached
  int restarts_ = 0;                 // of the part being packed
  std::uint64_t total_restarts_ = 0;
  std::deque<packed_entries> packed_;  // packed, not taken yet
};

}  // namespace scg::cluster

#pragma once
// Repair messages of protocol 4 carry their entries packed in one byte string
// (`entriesp`), which CAF copies whole, instead of a std::vector<entry> that
// it walks field by field on the multiplexer thread (a third of a sync
// source's CPU at a million bindings, docs/cluster.md). Pure, no actors
// (tests/unit/packed_entries_test.cpp).
//
// Each entry, in this order: key, backend, session, version's node (each a
// varint length, then the bytes), version's wall ms and logical counter
// (varints), one byte of flags (bit 0: deleted), and a varint stamp: a
// tombstone's expiry when deleted, else a live operation's start (0
// unknown), as in the field-by-field form. The shape is fixed within a
// protocol version; a later one that changes it sends a new message.

#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/replicated_table.hpp"

namespace scg::cluster {

/// Entries packed for one message.
struct packed_entries {
  std::string bytes;
  std::uint32_t count = 0;

  void add(const entry_view& e);
  void add(const entry& e);
  bool empty() const { return count == 0; }
};

/// Reads packed entries back, one at a time, into an entry whose strings'
/// capacity it reuses (a sync unpacks a million).
class packed_reader {
 public:
  explicit packed_reader(std::string_view bytes) : bytes_(bytes) {}

  /// The next entry into `e`: false at the end, or at bytes that are no
  /// entry (error() then says what and where; what came before stands).
  bool next(entry& e);
  /// Empty unless next() met bytes that are no entry.
  const std::string& error() const { return error_; }
  /// Entries read so far.
  std::uint32_t read() const { return read_; }

 private:
  bool varint(std::uint64_t& v, const char* field);
  bool text(std::string& out, const char* field);
  bool fail(const char* field, const char* what);

  std::string_view bytes_;
  std::size_t pos_ = 0;
  std::uint32_t read_ = 0;
  std::string error_;
};

}  // namespace scg::cluster

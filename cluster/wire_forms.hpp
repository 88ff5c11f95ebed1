#pragma once
// What the cluster actor sends, in the forms the wire takes: a batch of
// entries cut into messages, a digest as the vector of hashes it travels in
// (and back), a packed repair as the vector of entries a peer before
// protocol 4 takes. Pure, no actors (tests/unit/wire_forms_test.cpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cluster/packed_entries.hpp"
#include "cluster/replicated_table.hpp"

namespace scg::cluster {

/// `batch` in messages of `chunk` entries at most, its entries moved: a
/// refresh step's thousands of touches would otherwise be one message that
/// every peer deserializes and merges before the next on the connection.
/// One message at least (empty when `batch` is): SIGTERM's hand-off sends
/// it all the same, and its acknowledgment covers the deltas before it.
std::vector<std::vector<entry>> in_parts(std::vector<entry> batch, std::size_t chunk);

/// A 64-bucket digest (`digest`) as it travels.
std::vector<std::uint64_t> to_wire(const bucket_digest& d);
/// And back: hashes missing read as 0, extra ones are ignored (as every
/// release has read them).
bucket_digest bucket_digest_from(const std::vector<std::uint64_t>& v);

/// A fine digest (`digestf`) as it travels.
std::vector<std::uint64_t> to_wire(const fine_digest& d);
/// And back: nullopt unless it has exactly fine_buckets hashes.
std::optional<fine_digest> fine_digest_from(const std::vector<std::uint64_t>& v);

/// The whole buckets where two 64-bucket digests differ, as a repair's parts.
std::vector<bucket_part> differing_whole_buckets(const bucket_digest& ours, const bucket_digest& theirs);

/// A packed message as the vector of entries a peer before protocol 4 takes.
std::vector<entry> unpacked(const packed_entries& p);

}  // namespace scg::cluster

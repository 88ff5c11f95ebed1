#include "cluster/wire_forms.hpp"

#include <algorithm>
#include <iterator>

namespace scg::cluster {

std::vector<std::vector<entry>> in_parts(std::vector<entry> batch, std::size_t chunk) {
  std::vector<std::vector<entry>> parts;
  if (batch.size() <= chunk) {
    parts.push_back(std::move(batch));
    return parts;
  }
  for (auto it = batch.begin(); it != batch.end();) {
    const auto end = it + std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(chunk), batch.end() - it);
    parts.emplace_back(std::make_move_iterator(it), std::make_move_iterator(end));
    it = end;
  }
  return parts;
}

std::vector<std::uint64_t> to_wire(const bucket_digest& d) { return {d.begin(), d.end()}; }

bucket_digest bucket_digest_from(const std::vector<std::uint64_t>& v) {
  bucket_digest d{};
  for (std::size_t i = 0; i < d.size() && i < v.size(); ++i) d[i] = v[i];
  return d;
}

std::vector<std::uint64_t> to_wire(const fine_digest& d) { return {d.begin(), d.end()}; }

std::optional<fine_digest> fine_digest_from(const std::vector<std::uint64_t>& v) {
  if (v.size() != fine_buckets) return std::nullopt;
  fine_digest d;
  std::copy(v.begin(), v.end(), d.begin());
  return d;
}

std::vector<bucket_part> differing_whole_buckets(const bucket_digest& ours, const bucket_digest& theirs) {
  std::vector<bucket_part> parts;
  for (auto b : differing_buckets(ours, theirs)) parts.push_back({b});
  return parts;
}

std::vector<entry> unpacked(const packed_entries& p) {
  std::vector<entry> out;
  out.reserve(p.count);
  packed_reader in(p.bytes);
  for (entry e; in.next(e);) out.push_back(e);
  return out;
}

}  // namespace scg::cluster

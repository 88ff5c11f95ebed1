#include "cluster/packed_entries.hpp"

#include "core/protowire.hpp"

namespace scg::cluster {

namespace {

void put_text(std::string& out, std::string_view s) {
  core::protowire::put_varint(out, s.size());
  out.append(s);
}

}  // namespace

void packed_entries::add(const entry_view& e) {
  put_text(bytes, e.key);
  put_text(bytes, e.backend);
  put_text(bytes, e.session);
  put_text(bytes, e.node);
  core::protowire::put_varint(bytes, e.time.wall_ms);
  core::protowire::put_varint(bytes, e.time.logical);
  bytes.push_back(e.deleted ? '\1' : '\0');
  core::protowire::put_varint(bytes, e.deleted ? e.tombstone_expires_ms : e.started_ms);
  ++count;
}

void packed_entries::add(const entry& e) {
  add(entry_view{e.key, e.backend, e.session, e.ver.node, e.ver.time, e.deleted, e.tombstone_expires_ms,
                 e.started_ms});
}

bool packed_reader::fail(const char* field, const char* what) {
  error_ = std::string(what) + " in the " + field + " of entry " + std::to_string(read_) + " at byte " +
           std::to_string(pos_) + " of " + std::to_string(bytes_.size());
  return false;
}

bool packed_reader::varint(std::uint64_t& v, const char* field) {
  v = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ == bytes_.size()) return fail(field, "truncated varint");
    const auto b = static_cast<std::uint8_t>(bytes_[pos_++]);
    v |= std::uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) return true;
  }
  return fail(field, "varint longer than 10 bytes");
}

bool packed_reader::text(std::string& out, const char* field) {
  std::uint64_t n;
  if (!varint(n, field)) return false;
  if (n > bytes_.size() - pos_) return fail(field, "length past the end");
  out.assign(bytes_.data() + pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return true;
}

bool packed_reader::next(entry& e) {
  if (!error_.empty() || pos_ == bytes_.size()) return false;
  std::uint64_t wall, logical, stamp;
  if (!text(e.key, "key") || !text(e.backend, "backend") || !text(e.session, "session") ||
      !text(e.ver.node, "node") || !varint(wall, "wall time") || !varint(logical, "logical counter"))
    return false;
  if (logical > UINT32_MAX) return fail("logical counter", "value above 32 bits");
  if (pos_ == bytes_.size()) return fail("flags", "truncated byte");
  const auto flags = static_cast<std::uint8_t>(bytes_[pos_++]);
  if (flags > 1) return fail("flags", "unknown bits");
  if (!varint(stamp, "stamp")) return false;
  e.ver.time = {wall, static_cast<std::uint32_t>(logical)};
  e.deleted = flags == 1;
  e.tombstone_expires_ms = e.deleted ? stamp : 0;
  e.started_ms = e.deleted ? 0 : stamp;
  ++read_;
  return true;
}

}  // namespace scg::cluster

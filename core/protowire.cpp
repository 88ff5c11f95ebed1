#include "core/protowire.hpp"

namespace scg::core::protowire {

bool next(std::string_view& in, field& f) {
  const segment all{reinterpret_cast<const std::uint8_t*>(in.data()), in.size()};
  reader r(&all, 1);
  std::string reason;  // next() only says whether the bytes are valid (no allocation unless not)
  walked w;
  if (in.empty() || read_field(r, w, reason, 0, nullptr) != met::field) return false;
  f.number = w.number;
  f.type = w.type;
  f.varint = w.type == 0 ? w.value : 0;
  f.payload = {};
  if (w.type == 2) {
    f.payload = in.substr(r.pos(), w.value);
    r.skip(w.value);
  }
  f.whole = in.substr(0, r.pos());
  in.remove_prefix(r.pos());
  return true;
}

}  // namespace scg::core::protowire

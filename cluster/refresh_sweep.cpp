#include "cluster/refresh_sweep.hpp"

#include <algorithm>

#include "core/replicated_key.hpp"

namespace scg::cluster {

void judge_for_refresh(const entry_view& e, const binding_ttls& ttls, const actors::session_table& used,
                       std::int64_t wall_ms, std::int64_t steady_ms, refresh_batch& out) {
  if (e.deleted && e.tombstone_expires_ms <= static_cast<std::uint64_t>(wall_ms)) out.forget.emplace_back(e.key);
  const auto k = core::parse_key(e.key);
  if (e.deleted || !k || !core::is_binding(k->kind)) return;  // drains do not expire
  const bool session = k->kind == core::key_kind::session;
  const std::int64_t ttl = session ? ttls.session_ms : ttls.op_ms;
  const auto written = static_cast<std::int64_t>(e.time.wall_ms);
  if (kept_whatever_use(written, wall_ms, ttl)) return;
  const auto id = e.key.substr(2);
  auto seen = session ? used.session_last_seen(id) : used.op_last_seen(id);
  const std::int64_t last_use = seen && *seen > 0 ? wall_ms - (steady_ms - *seen) : 0;
  switch (binding_fate(written, last_use, wall_ms, ttl)) {
    case fate::keep: break;
    case fate::touch: out.touch.push_back(e.to_entry()); break;
    case fate::expire: out.expire.emplace_back(e.key); break;
  }
}

std::int64_t refresh_period_ms(const binding_ttls& ttls, std::int64_t round_ms) {
  return std::clamp<std::int64_t>(std::min(ttls.session_ms, ttls.op_ms) / 16, round_ms, 60'000);
}

}  // namespace scg::cluster

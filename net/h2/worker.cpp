#include "net/h2/worker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/h2/endpoints.hpp"
#include "net/net_stats.hpp"

namespace scg::net::h2 {

namespace {
constexpr std::size_t chunk_bytes = 256u << 10;
constexpr std::size_t min_read = 16u << 10;
constexpr auto tick_period = std::chrono::milliseconds(500);
/// Calls holding less than this are left alone under pressure.
constexpr std::size_t worth_compacting = 64u << 10;
}  // namespace

worker::worker(int index, const tuning& t) : index_(index), tune_(t), guard_(asio::make_work_guard(io_)) {}

worker::~worker() {
  stop();
  upstreams_.clear();
  dirty_.clear();
  if (chunk_) chunk_->unref();
}

void worker::start() {
  thread_ = std::thread([this] {
    chunk_ledger = &buffered;
    tick();
    io_.run();
  });
}

void worker::tick() {
  const auto now = std::chrono::steady_clock::now();
  downstreams_.erase(std::remove_if(downstreams_.begin(), downstreams_.end(), [](const auto& c) { return c.expired(); }),
                     downstreams_.end());
  // A connection may close itself here: tick copies.
  std::vector<std::shared_ptr<connection>> all;
  all.reserve(downstreams_.size() + upstreams_.size());
  for (auto& weak : downstreams_)
    if (auto c = weak.lock()) all.push_back(std::move(c));
  for (auto& u : upstreams_)
    if (u) all.push_back(u);
  for (auto& c : all) c->tick(now);
  flush_dirty();
  // A relief skipped for its 10 ms pause is retried here: a worker whose
  // windows are all spent reads nothing more that would call it.
  check_budget();
  const auto held = buffered.load(std::memory_order_relaxed);
  global_net_stats().buffered_bytes.fetch_add(static_cast<std::uint64_t>(held - reported_buffered_),
                                                  std::memory_order_relaxed);
  reported_buffered_ = held;
  ticker_.expires_after(tick_period);
  ticker_.async_wait([this](const asio::error_code& ec) {
    if (!ec) tick();
  });
}

void worker::relieve() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_relief_ < std::chrono::milliseconds(10)) return;  // nothing freed since: let bytes drain
  last_relief_ = now;
  struct holder {
    std::size_t bytes;
    std::shared_ptr<server_stream> call;
  };
  std::vector<holder> calls;
  for (auto& weak : downstreams_)
    if (auto c = weak.lock())
      for (auto& call : c->calls())
        if (auto b = call->held_bytes(); b >= worth_compacting) calls.push_back({b, std::move(call)});
  // First the read buffers that waiting calls keep alive for a few bytes each.
  std::size_t copied = 0;
  for (auto& h : calls) copied += h.call->compact();
  if (copied > 0) core::bump(global_net_stats().buffer_compacted_bytes_total, copied);
  if (buffered.load(std::memory_order_relaxed) <= tune_.worker_buffer_bytes) return;
  // Then the calls that hold the most, until the worker is within budget.
  std::sort(calls.begin(), calls.end(), [](const holder& a, const holder& b) { return a.bytes > b.bytes; });
  static core::log_throttle throttle;
  const auto budget_mib = tune_.worker_buffer_bytes >> 20;
  for (auto& h : calls) {
    if (buffered.load(std::memory_order_relaxed) <= tune_.worker_buffer_bytes) break;
    if (auto held = throttle.pass(); held >= 0)
      spdlog::get("forward")->warn("buffer_budget_spent worker={} held_bytes={} budget_mib={} suppressed={}", index_,
                                   h.bytes, budget_mib, held);
    h.call->shed("scg: this call held " + std::to_string(h.bytes >> 10) +
                 " KiB that its reader did not take, the most on a worker past its share (" +
                 std::to_string(budget_mib) + " MiB) of limits.buffer_mib");
  }
  flush_dirty();
}

void worker::stop() {
  guard_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void worker::flush_dirty() {
  // Flushing one connection can dirty another (a window update for the
  // producer of the bytes it framed); a few rounds settle it.
  for (int round = 0; round < 16 && !dirty_.empty(); ++round) {
    auto batch = std::move(dirty_);
    dirty_.clear();
    for (auto& c : batch) c->flush();
  }
}

char* worker::read_space(std::size_t& free) {
  if (chunk_ && chunk_->refs == 1) used_ = 0;  // no slice holds it: reuse from the start
  if (!chunk_ || chunk_->capacity - used_ < min_read) {
    if (chunk_) chunk_->unref();
    chunk_ = chunk::make(chunk_bytes);
    used_ = 0;
  }
  free = chunk_->capacity - used_;
  return chunk_->data() + used_;
}

std::shared_ptr<upstream_connection> worker::upstream(std::size_t index, const std::string& address,
                                                      int connect_timeout_ms) {
  if (upstreams_.size() <= index) upstreams_.resize(index + 1);
  auto& u = upstreams_[index];
  if (!u || !u->usable() || u->address() != address) {
    u = std::make_shared<upstream_connection>(*this, address, std::chrono::milliseconds(connect_timeout_ms), tune_);
    u->connect();
  }
  return u;
}

}  // namespace scg::net::h2

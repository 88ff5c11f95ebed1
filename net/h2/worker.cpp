#include "net/h2/worker.hpp"

#include "net/h2/endpoints.hpp"

namespace scg::net::h2 {

namespace {
constexpr std::size_t chunk_bytes = 256u << 10;
constexpr std::size_t min_read = 16u << 10;
}  // namespace

worker::worker(int index) : index_(index), guard_(asio::make_work_guard(io_)) {}

worker::~worker() {
  stop();
  upstreams_.clear();
  dirty_.clear();
  if (chunk_) chunk_->unref();
}

void worker::start() {
  thread_ = std::thread([this] { io_.run(); });
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
  static const tuning tune;
  if (upstreams_.size() <= index) upstreams_.resize(index + 1);
  auto& u = upstreams_[index];
  if (!u || !u->usable() || u->address() != address) {
    u = std::make_shared<upstream_connection>(*this, address, std::chrono::milliseconds(connect_timeout_ms), tune);
    u->connect();
  }
  return u;
}

}  // namespace scg::net::h2

#pragma once
// Bytes that cross the gateway without being copied: a socket read lands in a
// chunk, and the DATA payloads found in it travel to the other connection as
// slices that share the chunk. One worker thread owns a chunk and its slices,
// so the reference count is a plain integer.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
#include <new>
#include <string_view>
#include <utility>

namespace scg::net::h2 {

/// Where the chunks made on this thread are counted (bytes alive): a worker
/// points it at its own counter; on other threads nothing is counted.
inline thread_local std::atomic<std::int64_t>* chunk_ledger = nullptr;

/// A reference-counted block of bytes, allocated with its header.
struct chunk {
  std::size_t capacity;
  int refs;
  std::atomic<std::int64_t>* ledger;  // the counter it was made under, or null
  char* data() { return reinterpret_cast<char*>(this + 1); }

  static chunk* make(std::size_t capacity) {
    void* p = std::malloc(sizeof(chunk) + capacity);
    if (!p) throw std::bad_alloc();
    auto* c = new (p) chunk{capacity, 1, chunk_ledger};
    if (c->ledger) c->ledger->fetch_add(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
    return c;
  }
  static chunk* copy_of(std::string_view bytes) {
    chunk* c = make(bytes.size());
    if (!bytes.empty()) std::memcpy(c->data(), bytes.data(), bytes.size());
    return c;
  }
  void ref() { ++refs; }
  void unref() {
    if (--refs != 0) return;
    if (ledger) ledger->fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
    std::free(this);
  }
};

/// A view of bytes inside a chunk that keeps the chunk alive.
class slice {
 public:
  slice() = default;
  /// Shares `c` (takes a new reference).
  slice(chunk* c, std::size_t offset, std::size_t size) : c_(c), off_(offset), size_(size) { c_->ref(); }
  /// Takes over the caller's reference to `c`.
  static slice adopt(chunk* c, std::size_t size) {
    slice s;
    s.c_ = c;
    s.size_ = size;
    return s;
  }
  static slice copy_of(std::string_view bytes) { return adopt(chunk::copy_of(bytes), bytes.size()); }

  slice(const slice& o) : c_(o.c_), off_(o.off_), size_(o.size_) {
    if (c_) c_->ref();
  }
  slice(slice&& o) noexcept : c_(std::exchange(o.c_, nullptr)), off_(o.off_), size_(std::exchange(o.size_, 0)) {}
  slice& operator=(slice o) noexcept {
    std::swap(c_, o.c_);
    std::swap(off_, o.off_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~slice() {
    if (c_) c_->unref();
  }

  const char* data() const { return c_ ? c_->data() + off_ : nullptr; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data(), size_}; }
  /// True when this slice alone holds its chunk and fills most of it: a
  /// copy would free nothing.
  bool tight() const { return !c_ || (c_->refs == 1 && c_->capacity - size_ <= size_ / 4); }

  /// The first `n` bytes as a slice of their own; this keeps the rest.
  slice take_front(std::size_t n) {
    slice front(*this);
    front.size_ = n;
    off_ += n;
    size_ -= n;
    return front;
  }

 private:
  chunk* c_ = nullptr;
  std::size_t off_ = 0;
  std::size_t size_ = 0;
};

/// A FIFO of slices with its byte count. A slice may carry a debt (a pipe
/// notes the HTTP/2 window it owes the bytes' producer, paid as they leave;
/// a rewritten message owes what the original took). The storage is a
/// vector reused as the queue empties: a call's queues allocate once.
class slice_queue {
 public:
  /// Queues `s`; `marked`: it owes its own size.
  void push(slice s, bool marked = false) {
    const auto owed = marked ? s.size() : 0;
    push_owing(std::move(s), owed);
  }
  /// Queues `s` owing `owed` bytes of window.
  void push_owing(slice s, std::size_t owed) {
    if (s.empty()) return;
    bytes_ += s.size();
    q_.push_back({std::move(s), owed});
  }
  /// Moves up to `n` bytes from the front to `out` (a callable taking a
  /// slice); adds the debt they pay to `*marked` (all of a slice's debt once
  /// its last byte went, never more than the bytes before).
  template <class F>
  std::size_t pop(std::size_t n, F&& out, std::size_t* marked = nullptr) {
    std::size_t moved = 0;
    while (moved < n && head_ < q_.size()) {
      auto& front = q_[head_];
      const auto part = std::min(front.s.size(), n - moved);
      const auto pay = part == front.s.size() ? front.owed : std::min(front.owed, part);
      front.owed -= pay;
      if (marked) *marked += pay;
      moved += part;
      if (part == front.s.size()) {
        out(std::move(front.s));
        ++head_;
      } else {
        out(front.s.take_front(part));
      }
    }
    bytes_ -= moved;
    if (head_ == q_.size()) clear();
    return moved;
  }
  /// Moves every slice, with its debt, to the back of `to`.
  void move_to(slice_queue& to) {
    for (std::size_t i = head_; i < q_.size(); ++i) to.push_owing(std::move(q_[i].s), q_[i].owed);
    q_.clear();
    head_ = 0;
    bytes_ = 0;
  }
  /// The debt of everything queued.
  std::size_t owed() const {
    std::size_t n = 0;
    for (std::size_t i = head_; i < q_.size(); ++i) n += q_[i].owed;
    return n;
  }
  /// Drops everything; the debt it carried.
  std::size_t clear() {
    const auto debt = owed();
    q_.clear();
    head_ = 0;
    bytes_ = 0;
    return debt;
  }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  /// Copies the bytes of slices that share a chunk, or use little of one,
  /// into chunks of their own (order and marks kept): a queue that waits
  /// then holds its bytes, not the read buffers around them. The bytes copied.
  std::size_t compact() {
    std::size_t copied = 0;
    for (std::size_t i = head_; i < q_.size(); ++i) {
      auto& e = q_[i];
      if (e.s.tight()) continue;
      copied += e.s.size();
      e.s = slice::copy_of(e.s.view());
    }
    return copied;
  }
  /// Calls `f(const slice&)` for each queued slice, front first.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = head_; i < q_.size(); ++i) f(q_[i].s);
  }
  /// The queued slices (copies sharing the chunks), front first.
  std::vector<slice> items() const {
    std::vector<slice> out;
    for_each([&out](const slice& s) { out.push_back(s); });
    return out;
  }

 private:
  struct entry {
    slice s;
    std::size_t owed;
  };
  std::vector<entry> q_;
  std::size_t head_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace scg::net::h2

#pragma once
// The answer to one routed call (actors::router's resolve, resolve_held,
// rebind, bind_clone, find_operation). The data path's route_callback is
// wrapped at the router's door and answered exactly once from then on: by
// the router, by its routing deadline, or, should the answer be destroyed
// unanswered (the router exited with the call pending, or the message never
// reached it), with shutting_down, the answer of a replica going away.

#include <functional>
#include <memory>
#include <utility>

#include "actors/router.hpp"

namespace scg::actors {

/// The answer of a call that outlived its router.
inline route_result router_gone() {
  return {std::nullopt, "scg: replica is shutting down", core::local_reason::shutting_down};
}

/// Owns a route_callback and calls it exactly once. Move-only, so one owner
/// at a time can answer; destroyed without having answered, it answers
/// router_gone().
class route_answer {
 public:
  route_answer() = default;
  explicit route_answer(route_callback done) : done_(std::move(done)) {}
  route_answer(route_answer&& other) noexcept : done_(std::exchange(other.done_, nullptr)) {}
  route_answer& operator=(route_answer&& other) noexcept {
    if (this != &other) {
      abandon();
      done_ = std::exchange(other.done_, nullptr);
    }
    return *this;
  }
  route_answer(const route_answer&) = delete;
  route_answer& operator=(const route_answer&) = delete;
  ~route_answer() { abandon(); }

  /// Answers `r`; does nothing when answered already.
  void operator()(route_result r) {
    if (auto done = std::exchange(done_, nullptr)) done(std::move(r));
  }

  /// Whether it has yet to answer.
  explicit operator bool() const { return static_cast<bool>(done_); }

 private:
  void abandon() {
    if (done_) (*this)(router_gone());
  }

  route_callback done_;
};

/// How a route_answer rides in a message to the router: CAF 0.17 copies
/// message contents, which a move-only object cannot be, so it travels
/// behind a shared pointer and the router moves it out on arrival. A message
/// dropped unread (the router is gone) frees it, and it answers router_gone().
using route_answer_ptr = std::shared_ptr<route_answer>;

inline route_answer_ptr make_answer(route_callback done) {
  return std::make_shared<route_answer>(std::move(done));
}

}  // namespace scg::actors

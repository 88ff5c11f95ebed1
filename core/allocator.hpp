#pragma once
// What scg asks of its memory allocator, when it runs on jemalloc: main()
// fills these in (app/main.cpp); elsewhere they stay empty and do nothing.

#include <cstdint>

namespace scg::core {

struct allocator_hooks {
  /// Bytes the program holds allocated now (scg_process_heap_allocated_bytes).
  std::uint64_t (*allocated_bytes)() = nullptr;
  /// Returns freed pages to the system as far as the decay settings allow.
  /// jemalloc runs without a background thread here, so an idle replica
  /// would otherwise keep what a past burst freed until it allocates again.
  void (*release_freed)() = nullptr;
};

inline allocator_hooks& allocator() {
  static allocator_hooks hooks;
  return hooks;
}

}  // namespace scg::core

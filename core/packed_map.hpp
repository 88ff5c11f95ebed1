#pragma once
// A hash map from string keys to a small value, for the tables that hold one
// entry per session of the whole cluster. Each entry is one allocation: the
// value, the key's bytes and an optional tail of bytes the owner lays out; the
// index is an open-addressing array of pointers (linear probing, at most 3/4
// full, backward-shift deletion) beside an array of 32-bit hash tags, so a
// probe compares keys only where the tags match and a shift or a growth
// never hashes a key again. For a 50-byte key that is about 110 bytes an
// entry where std::unordered_map<std::string, V> takes about 140. Not
// thread-safe: callers lock.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

namespace scg::core {

template <class V>
class packed_map {
 public:
  /// One entry: the value, its key and its tail bytes, in one block.
  class item {
   public:
    V value;
    std::string_view key() const { return {bytes(), key_size_}; }
    std::string_view tail() const { return {bytes() + key_size_, tail_size_}; }
    char* tail_data() { return const_cast<char*>(bytes()) + key_size_; }

   private:
    friend class packed_map;
    template <class... A>
    item(std::uint32_t key_size, std::uint32_t tail_size, A&&... args)
        : value(std::forward<A>(args)...), key_size_(key_size), tail_size_(tail_size) {}
    const char* bytes() const { return reinterpret_cast<const char*>(this + 1); }
    std::uint32_t key_size_;
    std::uint32_t tail_size_;
  };

  /// The entry of `key`, or nullptr.
  item* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    return slots_[probe(key, tag_of(key))].get();
  }

  /// The entry of `key`; when absent, one is made from `args` with
  /// `tail_size` tail bytes (uninitialised). Second: whether it was made.
  template <class... A>
  std::pair<item*, bool> try_emplace(std::string_view key, std::size_t tail_size, A&&... args) {
    if ((used_ + 1) * 4 > slots_.size() * 3) grow();
    const auto tag = tag_of(key);
    const auto i = probe(key, tag);
    auto& slot = slots_[i];
    if (slot) return {slot.get(), false};
    tags_[i] = tag;
    void* block = ::operator new(sizeof(item) + key.size() + tail_size);
    slot.reset(new (block) item(static_cast<std::uint32_t>(key.size()), static_cast<std::uint32_t>(tail_size),
                                std::forward<A>(args)...));
    std::memcpy(const_cast<char*>(slot->bytes()), key.data(), key.size());
    ++used_;
    return {slot.get(), true};
  }

  /// Removes the entry of `key`; false when there was none.
  bool erase(std::string_view key) {
    if (slots_.empty()) return false;
    auto hole = probe(key, tag_of(key));
    if (!slots_[hole]) return false;
    // Backward shift: later entries of the probe run move up into the hole
    // unless their home slot lies (cyclically) after it.
    const std::size_t mask = slots_.size() - 1;
    slots_[hole].reset();
    --used_;
    bool moved = false;
    for (std::size_t j = (hole + 1) & mask; slots_[j]; j = (j + 1) & mask) {
      const std::size_t home = home_of(tags_[j]);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        slots_[hole] = std::move(slots_[j]);
        tags_[hole] = tags_[j];
        hole = j;
        moved = true;
      }
    }
    moves_ += moved;
    return true;
  }

  /// Removes every entry `drop(item&)` says true of; returns how many.
  template <class F>
  std::size_t erase_if(F&& drop) {
    std::vector<std::string> gone;  // collected first: removal moves entries about
    for_each([&](item& it) {
      if (drop(it)) gone.emplace_back(it.key());
    });
    for (const auto& key : gone) erase(key);
    return gone.size();
  }

  /// Calls `f(item&)` for every entry, in no particular order; `f` must not
  /// add or remove entries.
  template <class F>
  void for_each(F&& f) const {
    for_each_slots(0, slots_.size(), std::forward<F>(f));
  }

  /// Calls `f(item&)` for the entries in slots [from, from + slots), as
  /// for_each; returns the slot after the last one visited (capacity() once
  /// past the end). A pass resumed across changes may miss or revisit
  /// entries that a growth moved.
  template <class F>
  std::size_t for_each_slots(std::size_t from, std::size_t slots, F&& f) const {
    const std::size_t end = std::min(slots_.size(), from + slots);
    for (std::size_t i = from; i < end; ++i) {
      // Entries are separate blocks all over the heap: a pass over a large
      // map waits on a cache miss per entry unless it asks for the next
      // ones early (a pass over a million entries appending key and tail,
      // as a sync source packs them: 113-144 ms without, 89-91 ms with).
      if (i + prefetch_ahead < end) prefetch(slots_[i + prefetch_ahead].get());
      if (slots_[i]) f(*slots_[i]);
    }
    return std::max(from, end);
  }

  /// The slots (entries and empty ones) the map has.
  std::size_t capacity() const { return slots_.size(); }

  /// How many times entries have changed slots (a growth, or a removal that
  /// shifted the entries after it): a pass in steps that sees it change may
  /// have missed entries, moved from after its position to before it.
  std::uint64_t moves() const { return moves_; }

  std::size_t size() const { return used_; }

 private:
  struct item_free {
    void operator()(item* it) const noexcept {
      it->~item();
      ::operator delete(it);
    }
  };
  using item_ptr = std::unique_ptr<item, item_free>;

  /// How many slots ahead a pass asks for entries, and the two cache lines
  /// of an entry it asks for (the head and the start of the bytes after it).
  static constexpr std::size_t prefetch_ahead = 8;
  static void prefetch(const item* it) {
    if (!it) return;
    __builtin_prefetch(it);
    __builtin_prefetch(reinterpret_cast<const char*>(it) + 64);
  }

  /// A key's tag: the top 32 bits of its hash times 2^64/phi (Fibonacci
  /// hashing), so keys whose hashes share their low bits (one shard of a
  /// table split by hash) still spread over the whole array.
  static std::uint32_t tag_of(std::string_view key) {
    const std::uint64_t h = std::hash<std::string_view>{}(key);
    return static_cast<std::uint32_t>((h * 0x9e3779b97f4a7c15ULL) >> 32);
  }

  /// The slot a tag's probe starts from: its top bits.
  std::size_t home_of(std::uint32_t tag) const { return static_cast<std::size_t>(tag >> shift_); }

  /// The slot holding `key` (whose tag is `tag`), or the empty slot where it
  /// would go (there is always one: the array is at most 3/4 full).
  std::size_t probe(std::string_view key, std::uint32_t tag) const {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home_of(tag);; i = (i + 1) & mask)
      if (!slots_[i] || (tags_[i] == tag && slots_[i]->key() == key)) return i;
  }

  void grow() {
    ++moves_;
    std::vector<item_ptr> old = std::move(slots_);
    std::vector<std::uint32_t> old_tags = std::move(tags_);
    slots_ = std::vector<item_ptr>(old.empty() ? 8 : old.size() * 2);
    tags_ = std::vector<std::uint32_t>(slots_.size());
    shift_ = 32 - static_cast<unsigned>(__builtin_ctzll(slots_.size()));
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t k = 0; k < old.size(); ++k) {
      if (!old[k]) continue;
      std::size_t i = home_of(old_tags[k]);  // keys are distinct: the first free slot
      while (slots_[i]) i = (i + 1) & mask;
      slots_[i] = std::move(old[k]);
      tags_[i] = old_tags[k];
    }
  }

  std::vector<item_ptr> slots_;
  std::vector<std::uint32_t> tags_;  // beside slots_: each entry's tag_of
  std::size_t used_ = 0;
  std::uint64_t moves_ = 0;
  unsigned shift_ = 29;  // 32 - log2(slots_.size()); slots_ has at most 2^32 slots
};

}  // namespace scg::core

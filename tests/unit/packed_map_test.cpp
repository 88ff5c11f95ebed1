#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/packed_map.hpp"

using scg::core::packed_map;

TEST_CASE("a packed map agrees with std::map through inserts, erases and growth", "[packed_map]") {
  packed_map<int> m;
  std::map<std::string, int> model;
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const std::string key = "k" + std::to_string(rng() % 2000);
    switch (rng() % 3) {
      case 0:
      case 1: {
        auto [it, made] = m.try_emplace(key, 0, i);
        CHECK(made == !model.count(key));
        if (made) model[key] = i;
        CHECK(it->value == model[key]);  // an existing entry keeps its value
        CHECK(it->key() == key);
        break;
      }
      default:
        CHECK(m.erase(key) == (model.erase(key) == 1));
    }
  }
  REQUIRE(m.size() == model.size());
  for (const auto& [key, value] : model) {
    auto* it = m.find(key);
    REQUIRE(it);
    CHECK(it->value == value);
  }
  CHECK_FALSE(m.find("absent"));
  std::size_t seen = 0;
  m.for_each([&](const packed_map<int>::item& it) {
    ++seen;
    CHECK(model.at(std::string(it.key())) == it.value);
  });
  CHECK(seen == model.size());
}

TEST_CASE("entries keep their tail bytes and addresses as the map grows", "[packed_map]") {
  packed_map<long> m;
  auto [first, made] = m.try_emplace("first", 5, 1L);
  REQUIRE(made);
  std::memcpy(first->tail_data(), "hello", 5);
  for (int i = 0; i < 1000; ++i) m.try_emplace("key-" + std::to_string(i), 0, long{i});
  CHECK(m.find("first") == first);  // the index grew; the entry did not move
  CHECK(first->tail() == "hello");
  CHECK(m.erase_if([](const packed_map<long>::item& it) { return it.value % 2 == 1; }) == 501);
  CHECK(m.size() == 500);
  CHECK_FALSE(m.find("first"));
  CHECK(m.find("key-998"));
  CHECK_FALSE(m.find("key-999"));
}

TEST_CASE("keys of one session-table shard (one value of the hash's low bits) are found and erased",
          "[packed_map]") {
  // actors/session_table shards by std::hash % 16: one shard's map sees only
  // keys whose hashes share their low 4 bits.
  packed_map<int> m;
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 5000; ++i) {
    std::string k = "tenant\x1fuser\x1fsession-" + std::to_string(i);
    if (std::hash<std::string_view>{}(k) % 16 == 3) keys.push_back(std::move(k));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) CHECK(m.try_emplace(keys[i], 0, static_cast<int>(i)).second);
  for (std::size_t i = 0; i < keys.size(); i += 2) CHECK(m.erase(keys[i]));
  CHECK(m.size() == keys.size() / 2);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto* it = m.find(keys[i]);
    if (i % 2) {
      REQUIRE(it);
      CHECK(it->value == static_cast<int>(i));
    } else {
      CHECK_FALSE(it);
    }
  }
}

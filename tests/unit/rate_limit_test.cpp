#include "auth/rate_limit.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "core/local_reply.hpp"
#include "google_rpc.pb.h"

using namespace scg::auth;
using namespace std::chrono_literals;

namespace {

struct fake_clock {
  limit_clock::time_point t{};
  rate_limiter::now_fn fn() {
    return [this] { return t; };
  }
};

rate_limits_config limits(std::optional<rate> per_tenant, std::optional<rate> per_user = {}) {
  rate_limits_config c;
  c.per_tenant = per_tenant;
  c.per_user = per_user;
  return c;
}

}  // namespace

TEST_CASE("a token bucket allows its burst, then refills at its rate", "[rate_limit]") {
  limit_clock::time_point t{};
  token_bucket b(10, 3, t);
  CHECK(b.try_take(t).allowed);
  CHECK(b.try_take(t).allowed);
  CHECK(b.try_take(t).allowed);
  auto refused = b.try_take(t);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 100ms);  // one token at 10/s
  t += 50ms;
  refused = b.try_take(t);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 50ms);
  t += 50ms;
  CHECK(b.try_take(t).allowed);
  // Idle time never stores more than the burst.
  t += 1h;
  for (int i = 0; i < 3; ++i) CHECK(b.try_take(t).allowed);
  CHECK_FALSE(b.try_take(t).allowed);
}

TEST_CASE("a share scales rate and burst, but never below one token", "[rate_limit]") {
  limit_clock::time_point t{};
  token_bucket b(10, 4, t);
  // Half the cluster's limit: burst 2, rate 5/s.
  CHECK(b.try_take(t, 0.5).allowed);
  CHECK(b.try_take(t, 0.5).allowed);
  auto refused = b.try_take(t, 0.5);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 200ms);
  // A tiny share still admits one request, at the scaled rate.
  token_bucket tiny(1, 2, t);
  CHECK(tiny.try_take(t, 0.1).allowed);
  refused = tiny.try_take(t, 0.1);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 10s);
}

TEST_CASE("the limiter refuses per tenant and leaves other tenants alone", "[rate_limit]") {
  fake_clock clock;
  rate_limiter limiter(limits(rate{1, 2}), clock.fn());
  CHECK(limiter.try_acquire("a", "u").allowed);
  CHECK(limiter.try_acquire("a", "v").allowed);
  auto refused = limiter.try_acquire("a", "w");
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 1000ms);
  CHECK(limiter.try_acquire("b", "u").allowed);
  clock.t += 1s;
  CHECK(limiter.try_acquire("a", "w").allowed);
}

TEST_CASE("per-user limits hold inside a tenant, and a tenant refusal costs the user nothing",
          "[rate_limit]") {
  fake_clock clock;
  rate_limiter limiter(limits(rate{1, 3}, rate{1, 2}), clock.fn());
  CHECK(limiter.try_acquire("a", "alice").allowed);
  CHECK(limiter.try_acquire("a", "alice").allowed);
  CHECK_FALSE(limiter.try_acquire("a", "alice").allowed);  // alice's bucket
  CHECK(limiter.try_acquire("a", "bob").allowed);          // the tenant's last token
  CHECK_FALSE(limiter.try_acquire("a", "carol").allowed);  // the tenant's bucket
  // Carol's user token was given back, so she gets through once the tenant refills.
  clock.t += 1s;
  CHECK(limiter.try_acquire("a", "carol").allowed);
  // The same user name in another tenant is another user.
  CHECK(limiter.try_acquire("b", "alice").allowed);
}

TEST_CASE("a tenant override replaces the per-tenant limit", "[rate_limit]") {
  fake_clock clock;
  auto cfg = limits(rate{1, 1});
  cfg.tenants.emplace("big", rate{100, 5});
  rate_limiter limiter(cfg, clock.fn());
  for (int i = 0; i < 5; ++i) CHECK(limiter.try_acquire("big", "u").allowed);
  CHECK_FALSE(limiter.try_acquire("big", "u").allowed);
  CHECK(limiter.try_acquire("small", "u").allowed);
  CHECK_FALSE(limiter.try_acquire("small", "u").allowed);
}

TEST_CASE("each replica enforces its share of the cluster limit", "[rate_limit]") {
  fake_clock clock;
  rate_limiter limiter(limits(rate{30, 30}), clock.fn());
  limiter.set_share(1.0 / 3);  // three live members
  int allowed = 0;
  for (int i = 0; i < 30; ++i) allowed += limiter.try_acquire("a", "u").allowed;
  CHECK(allowed == 10);
  clock.t += 1s;
  allowed = 0;
  for (int i = 0; i < 30; ++i) allowed += limiter.try_acquire("a", "u").allowed;
  CHECK(allowed == 10);
  limiter.set_share(0);  // nonsense shares fall back to the whole limit
  CHECK(limiter.share() == 1.0);
  limiter.set_share(7);
  CHECK(limiter.share() == 1.0);
}

TEST_CASE("without limits every request passes", "[rate_limit]") {
  rate_limiter limiter(rate_limits_config{});
  CHECK_FALSE(limiter.enabled());
  for (int i = 0; i < 1000; ++i) CHECK(limiter.try_acquire("a", "u").allowed);
  CHECK(limiter.size() == 0);
}

TEST_CASE("the limiter holds a bounded number of keys", "[rate_limit]") {
  fake_clock clock;
  rate_limiter limiter(limits(std::nullopt, rate{1, 1}), clock.fn(), 160);
  for (int i = 0; i < 5000; ++i) limiter.try_acquire("a", "user-" + std::to_string(i));
  CHECK(limiter.size() <= 160);
  // The most recent user is still limited.
  CHECK_FALSE(limiter.try_acquire("a", "user-4999").allowed);
}

TEST_CASE("concurrent requests never exceed the burst", "[rate_limit]") {
  fake_clock clock;  // time stands still: only the burst is available
  rate_limiter limiter(limits(rate{1, 100}), clock.fn());
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i)
        if (limiter.try_acquire("a", "u").allowed) ++allowed;
    });
  for (auto& t : threads) t.join();
  CHECK(allowed == 100);
}

TEST_CASE("a refusal's status details carry a RetryInfo clients honour", "[rate_limit]") {
  std::string bytes = scg::core::retry_status_details(8, "rate limit exceeded for tenant a", 1500ms);
  google::rpc::Status status;
  REQUIRE(status.ParseFromString(bytes));
  CHECK(status.code() == 8);
  CHECK(status.message() == "rate limit exceeded for tenant a");
  REQUIRE(status.details_size() == 1);
  CHECK(status.details(0).type_url() == "type.googleapis.com/google.rpc.RetryInfo");
  google::rpc::RetryInfo info;
  REQUIRE(status.details(0).UnpackTo(&info));
  CHECK(info.retry_delay().seconds() == 1);
  CHECK(info.retry_delay().nanos() == 500'000'000);
}

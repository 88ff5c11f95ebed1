// The log of recent local writes behind hinted handoff (cluster/write_log.hpp):
// which keys a member back up is sent, and when the log no longer reaches
// back far enough, so the member is repaired by digest instead.
#include <catch2/catch.hpp>

#include "cluster/write_log.hpp"

using scg::cluster::write_log;
using keys = std::vector<std::string>;

TEST_CASE("a member back up gets the keys written since it was last heard, each once", "[write_log]") {
  write_log log(100);
  log.add("s/a", 10);
  log.add("s/b", 20);
  log.add("o/x", 30);
  log.add("s/a", 40);  // written again: sent once, in the order of its last write
  CHECK(log.since(20) == keys{"s/b", "o/x", "s/a"});
  CHECK(log.since(31) == keys{"s/a"});
  CHECK(log.since(41) == keys{});
  CHECK(log.since(0) == keys{"s/b", "o/x", "s/a"});
  CHECK(log.size() == 4);
}

TEST_CASE("a full log drops its oldest keys and then cannot answer for their time", "[write_log]") {
  write_log log(3);
  for (int i = 1; i <= 5; ++i) log.add("s/" + std::to_string(i), i * 10);  // 10 and 20 dropped
  CHECK(log.size() == 3);
  CHECK_FALSE(log.since(0).has_value());
  CHECK_FALSE(log.since(20).has_value());  // a key written at 20 is gone
  CHECK(log.since(21) == keys{"s/3", "s/4", "s/5"});
  CHECK(log.since(31) == keys{"s/4", "s/5"});
}

TEST_CASE("keys dropped at one time leave that time unanswerable even when others of it remain", "[write_log]") {
  write_log log(2);
  log.add("s/a", 10);
  log.add("s/b", 10);
  log.add("s/c", 10);  // s/a, written at 10, is dropped
  CHECK_FALSE(log.since(10).has_value());
  CHECK(log.since(11) == keys{});
}

TEST_CASE("a log of no capacity answers for nothing already written", "[write_log]") {
  write_log log(0);
  CHECK(log.since(0) == keys{});  // nothing written yet: nothing missed
  log.add("s/a", 10);
  CHECK(log.size() == 0);
  CHECK_FALSE(log.since(5).has_value());
  CHECK(log.since(11) == keys{});
}

TEST_CASE("a member seen down is handed what went to it since it was last heard or its link fell silent",
          "[write_log]") {
  using scg::cluster::missed_since_ms;
  // Frozen: heard until its link went silent, seen down a time-out and a
  // heartbeat (1.25 s) later; 1 s more for writes lost on the way.
  CHECK(missed_since_ms(10'000, 11'250, 1250, 1000) == 9'000);
  // Its link dropped soon after it was last heard (a kill): from the
  // earliest it could have gone silent unseen.
  CHECK(missed_since_ms(10'000, 10'200, 1250, 1000) == 7'950);
  // Last heard long before (nothing to say on an idle link): from then.
  CHECK(missed_since_ms(5'000, 11'250, 1250, 1000) == 4'000);
}

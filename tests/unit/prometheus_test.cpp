#include <catch2/catch.hpp>

#include <string>

#include "core/metrics.hpp"
#include "core/prometheus.hpp"

using namespace scg::core;

TEST_CASE("the Prometheus writer names, escapes and formats as the text format asks", "[prometheus]") {
  std::string out;
  prometheus_writer w(out);
  w.family("widgets_total", "Widgets made", "counter").sample(std::uint64_t{3});
  w.family("widget_ratio", "A ratio", "gauge");
  w.sample({{"pool", "a\"b\\c\nd"}, {"stat", "min"}}, 0.5);
  w.sample({{"pool", "plain"}}, std::string("1"));
  CHECK(out ==
        "# HELP scg_widgets_total Widgets made\n"
        "# TYPE scg_widgets_total counter\n"
        "scg_widgets_total 3\n"
        "# HELP scg_widget_ratio A ratio\n"
        "# TYPE scg_widget_ratio gauge\n"
        "scg_widget_ratio{pool=\"a\\\"b\\\\c\\nd\",stat=\"min\"} 0.500000\n"
        "scg_widget_ratio{pool=\"plain\"} 1\n");
  CHECK(prometheus_label("x") == "x");
}

TEST_CASE("a histogram renders cumulative buckets, sum and count", "[prometheus]") {
  static constexpr std::array<std::uint64_t, 2> bounds{1000, 5000};
  histogram<2> h;
  h.observe(bounds, 500);
  h.observe(bounds, 2000);
  h.observe(bounds, 9000);
  std::string out;
  prometheus_writer w(out);
  w.family("wait_seconds", "Waits", "histogram");
  h.render(w, {"rpc", "Config"}, bounds, true);
  CHECK(out ==
        "# HELP scg_wait_seconds Waits\n"
        "# TYPE scg_wait_seconds histogram\n"
        "scg_wait_seconds_bucket{rpc=\"Config\",le=\"0.001000\"} 1\n"
        "scg_wait_seconds_bucket{rpc=\"Config\",le=\"0.005000\"} 2\n"
        "scg_wait_seconds_bucket{rpc=\"Config\",le=\"+Inf\"} 3\n"
        "scg_wait_seconds_sum{rpc=\"Config\"} 0.011500\n"
        "scg_wait_seconds_count{rpc=\"Config\"} 3\n");
  std::string empty;
  prometheus_writer e(empty);
  histogram<2>{}.render(e, {}, bounds, true);
  CHECK(empty.empty());
  histogram<2>{}.render(e, {}, bounds, false);
  CHECK(empty.find("_count 0\n") != std::string::npos);
}

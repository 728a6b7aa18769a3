#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "models/unit_parse.h"

using namespace memtwin;

TEST_CASE("sizes parse with decimal and binary prefixes", "[unit]") {
  CHECK(parse_bytes("80GiB").count() == 80LL * 1024 * 1024 * 1024);
  CHECK(parse_bytes("30TB").count() == 30'000'000'000'000LL);
  CHECK(parse_bytes("1.5 KiB").count() == 1536);
  CHECK(parse_bytes("512B").count() == 512);
  CHECK(parse_bytes("81559MiB").count() == 81559LL * 1024 * 1024);
}

TEST_CASE("rates, durations and compute parse to base units", "[unit]") {
  CHECK(parse_bandwidth("450GB/s").value() == Approx(450e9));
  CHECK(parse_bandwidth("400Gbps").value() == Approx(50e9));
  CHECK(parse_bandwidth("3.35TB/s").value() == Approx(3.35e12));
  CHECK(parse_bandwidth("1GiB/s").value() == Approx(1073741824.0));
  CHECK(parse_duration("2us").value() == Approx(2e-6));
  CHECK(parse_duration("50ms").value() == Approx(0.05));
  CHECK(parse_duration("2min").value() == Approx(120));
  CHECK(parse_flops_rate("989TFLOPS").value() == Approx(989e12));
  CHECK(parse_flops_rate("312 TFLOP/s").value() == Approx(312e12));
  CHECK(parse_rate_per_second("600/min") == Approx(10));
}

TEST_CASE("missing, unknown and negative units are rejected with the accepted list", "[unit]") {
  CHECK_THROWS_WITH(parse_bytes("80"), Catch::Contains("has no unit") && Catch::Contains("GiB"));
  CHECK_THROWS_WITH(parse_bytes("80GiBs"), Catch::Contains("unknown unit 'GiBs'"));
  CHECK_THROWS_WITH(parse_bytes("-1GiB"), Catch::Contains("negative"));
  CHECK_THROWS_WITH(parse_bandwidth("450GB"), Catch::Contains("unknown unit 'GB'"));
  CHECK_THROWS_WITH(parse_duration("fast"), Catch::Contains("does not start with a number"));
  CHECK_THROWS_WITH(parse_bytes("inf GiB"), Catch::Contains("not a finite number"));
}

TEST_CASE("canonical formatting parses back to the same value", "[unit]") {
  for (const char* text : {"80GiB", "81559MiB", "30TB", "1536B", "2TiB", "3GB"}) {
    Bytes b = parse_bytes(text);
    CHECK(parse_bytes(format_bytes(b)) == b);
  }
  CHECK(format_bytes(parse_bytes("80GiB")) == "80GiB");
  for (const char* text : {"450GB/s", "400Gbps", "3.35TB/s", "864GB/s"}) {
    BytesPerSec r = parse_bandwidth(text);
    CHECK(parse_bandwidth(format_bandwidth(r)).value() == r.value());
  }
  for (const char* text : {"2us", "80us", "1.5s", "5ms"}) {
    Seconds s = parse_duration(text);
    CHECK(parse_duration(format_duration(s)).value() == s.value());
  }
  CHECK(format_duration(parse_duration("2us")) == "2us");
  CHECK(format_flops_rate(parse_flops_rate("989TFLOPS")) == "989TFLOPS");
}

TEST_CASE("a negative size prints with its sign, the most negative one included", "[unit]") {
  CHECK(human_bytes(Bytes(-1536)) == "-1.5 KiB");
  // -INT64_MIN does not fit an int64: formatting it must not negate the integer (it recursed).
  CHECK(human_bytes(Bytes(std::numeric_limits<std::int64_t>::min())).front() == '-');
}

// Request traces: every malformed row is refused with the file, the row, the column and what is
// wrong, as a ScenarioError under inference.workload.trace (exit 2), never a parse exception.
//  * CSV with a header: memtwin's (arrival_s, prompt_tokens, output_tokens), Azure's LLM inference
//    traces (TIMESTAMP, ContextTokens, GeneratedTokens) and BurstGPT's (Timestamp, Request tokens,
//    Response tokens).
//  * JSON Lines, one object per request: memtwin's names, or Mooncake's (timestamp in milliseconds,
//    input_length, output_length, hash_ids: one id per 512-token block of the prompt). Blocks whose
//    prefix another request of the trace shares become the request's shared prefix, grouped by its
//    first block, so that prefix caching can reuse them.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "models/hash.h"
#include "models/scenario/scenario_error.h"
#include "models/serving/request_stream.h"
#include "models/unit_parse.h"

namespace memtwin {
namespace {

constexpr const char* kKey = "inference.workload.trace";
constexpr std::int64_t kMaxTraceRows = 10'000'000;  // a serving simulation of more runs for minutes
constexpr int kMaxTokens = 1 << 30;

struct Cell {
  std::string text;
  int column = 1;  // 1-based character column of the cell's start
};

std::vector<Cell> split_row(const std::string& line) {
  std::vector<Cell> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    std::string text = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::size_t lead = 0;
    while (lead < text.size() && (text[lead] == ' ' || text[lead] == '\t')) ++lead;
    while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) text.pop_back();
    text.erase(0, std::min(lead, text.size()));
    // A quoted cell ("12") holds the text between the quotes.
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
    cells.push_back({text, static_cast<int>(start + lead + 1)});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return cells;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

class TraceParser {
 public:
  explicit TraceParser(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(int line, int column, const std::string& message) const {
    throw ScenarioError({path_, line, column}, kKey, message);
  }

  // Seconds of a `timestamp` cell: plain seconds, or "YYYY-MM-DD hh:mm:ss(.fff)" (Azure's traces).
  double timestamp(const Cell& c, int line) const {
    if (auto plain = parse_plain_number(c.text)) return *plain;
    const std::string& s = c.text;
    int year = 0, month = 0, day = 0, hour = 0, minute = 0, consumed = 0;
    if (std::sscanf(s.c_str(), "%4d-%2d-%2d %2d:%2d:%n", &year, &month, &day, &hour, &minute, &consumed) != 5 ||
        consumed == 0) {
      fail(line, c.column, "'" + s + "' is neither seconds nor a YYYY-MM-DD hh:mm:ss timestamp");
    }
    const auto seconds = parse_plain_number(s.substr(static_cast<std::size_t>(consumed)));
    if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || !seconds || *seconds < 0 ||
        *seconds >= 61) {
      fail(line, c.column, "'" + s + "' is not a valid YYYY-MM-DD hh:mm:ss timestamp");
    }
    return static_cast<double>(days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day))) * 86400 +
           hour * 3600.0 + minute * 60.0 + *seconds;
  }

  int tokens(const Cell& c, int line, const char* what) const {
    const auto v = parse_plain_number(c.text);
    if (!v || std::floor(*v) != *v) fail(line, c.column, std::string(what) + " '" + c.text + "' is not a whole number");
    if (*v < 0 || *v > kMaxTokens) {
      fail(line, c.column, std::string(what) + " " + c.text + " is outside 0.." + std::to_string(kMaxTokens));
    }
    return std::max(1, static_cast<int>(*v));  // a 0-token row still costs the engine one token
  }

  std::vector<Request> read() {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec)) fail(0, 0, path_ + " is not a regular file");
    std::ifstream in(path_, std::ios::binary);
    if (!in) fail(0, 0, "cannot read the trace");
    std::string header;
    std::getline(in, header);
    if (header.rfind("\xEF\xBB\xBF", 0) == 0) header.erase(0, 3);  // a UTF-8 byte-order mark
    if (header.find_first_not_of(" \t") != std::string::npos && header[header.find_first_not_of(" \t")] == '{') {
      return read_json_lines(in, header);
    }
    const std::vector<Cell> header_cells = split_row(header);
    std::vector<std::string> columns;
    for (const Cell& c : header_cells) columns.push_back(c.text);
    // The column of one quantity under any of its names; two columns for it leave which one the
    // trace means open, so they are refused.
    auto find = [&](std::initializer_list<const char*> names) {
      int found = -1;
      for (std::size_t i = 0; i < columns.size(); ++i) {
        if (std::find_if(names.begin(), names.end(), [&](const char* n) { return columns[i] == n; }) == names.end()) continue;
        if (found >= 0) {
          fail(1, header_cells[i].column, "'" + columns[i] + "' repeats column " + std::to_string(found + 1) + " ('" +
                                              columns[static_cast<std::size_t>(found)] + "'): keep one");
        }
        found = static_cast<int>(i);
      }
      return found;
    };
    const int arrival = find({"arrival_s", "timestamp", "TIMESTAMP", "Timestamp"});
    const bool plain_seconds = arrival >= 0 && columns[static_cast<std::size_t>(arrival)] == "arrival_s";
    const int prompt = find({"prompt_tokens", "ContextTokens", "Request tokens"});
    const int output = find({"output_tokens", "GeneratedTokens", "Response tokens"});
    if (arrival < 0 || prompt < 0 || output < 0) {
      fail(1, 1, "the header needs arrival_s (or timestamp, Timestamp), prompt_tokens (or ContextTokens, Request tokens) "
                 "and output_tokens (or GeneratedTokens, Response tokens)");
    }
    const int needed = std::max({arrival, prompt, output}) + 1;
    std::vector<Request> out;
    double first = 0, previous = 0;
    int line_no = 1;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.empty() || line == "\r") continue;
      if (static_cast<std::int64_t>(out.size()) >= kMaxTraceRows) {
        fail(line_no, 1, "more than " + std::to_string(kMaxTraceRows) +
                             " requests: sample or split the trace (a serving simulation of more runs for minutes)");
      }
      const std::vector<Cell> cells = split_row(line);
      if (static_cast<int>(cells.size()) < needed) {
        fail(line_no, static_cast<int>(line.size()) + 1,
             "too few columns (" + std::to_string(cells.size()) + ", the header names " + std::to_string(columns.size()) + ")");
      }
      Request r;
      r.id = static_cast<std::int64_t>(out.size());
      const Cell& when = cells[static_cast<std::size_t>(arrival)];
      double t = 0;
      if (plain_seconds) {
        const auto v = parse_plain_number(when.text);
        if (!v) fail(line_no, when.column, "arrival_s '" + when.text + "' is not a number of seconds");
        t = *v;
      } else {
        t = timestamp(when, line_no);
        if (out.empty()) first = t;
        t -= first;  // rebased to the first request
      }
      if (!std::isfinite(t) || t < 0) fail(line_no, when.column, "the arrival " + when.text + " is negative or not finite");
      if (!out.empty() && t < previous) {
        fail(line_no, when.column, "the arrival " + when.text + " is earlier than the previous row's: sort the trace by arrival");
      }
      previous = t;
      r.arrival_s = t;
      r.trace_row = line_no;
      r.prompt_tokens = tokens(cells[static_cast<std::size_t>(prompt)], line_no, "prompt_tokens");
      r.output_tokens = tokens(cells[static_cast<std::size_t>(output)], line_no, "output_tokens");
      out.push_back(r);
    }
    if (out.empty()) fail(line_no, 1, "the trace has a header but no requests");
    return out;
  }

  // One JSON object per line (the first already read into `first`).
  std::vector<Request> read_json_lines(std::istream& in, const std::string& first) {
    std::vector<Request> out;
    std::vector<std::vector<std::int64_t>> blocks;  // each request's hash_ids
    double previous = 0, origin = 0;
    int line_no = 0;
    std::string line = first;
    do {
      ++line_no;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      if (line.empty()) continue;
      if (static_cast<std::int64_t>(out.size()) >= kMaxTraceRows) {
        fail(line_no, 1, "more than " + std::to_string(kMaxTraceRows) +
                             " requests: sample or split the trace (a serving simulation of more runs for minutes)");
      }
      nlohmann::json row;
      try {
        row = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        fail(line_no, 1, std::string("not a JSON object: ") + e.what());
      }
      if (!row.is_object()) fail(line_no, 1, "each line is one JSON object (a request)");
      auto number = [&](std::initializer_list<const char*> names, const char* what) -> std::pair<double, std::string> {
        std::string found;
        for (const char* n : names) {
          if (!row.contains(n)) continue;
          if (!found.empty()) fail(line_no, 1, "'" + std::string(n) + "' and '" + found + "' both give " + what + ": keep one");
          found = n;
        }
        if (found.empty()) {
          std::string list;
          for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
          fail(line_no, 1, std::string("no ") + what + " (" + list + ")");
        }
        const nlohmann::json& v = row[found];
        if (!v.is_number() || !std::isfinite(v.get<double>())) fail(line_no, 1, "'" + found + "' is not a number");
        return {v.get<double>(), found};
      };
      auto whole = [&](std::initializer_list<const char*> names, const char* what) {
        const auto [v, name] = number(names, what);
        if (std::floor(v) != v || v < 0 || v > kMaxTokens) {
          fail(line_no, 1, "'" + name + "' " + std::to_string(v) + " is not a whole number of tokens in 0.." + std::to_string(kMaxTokens));
        }
        return std::max(1, static_cast<int>(v));  // a 0-token row still costs the engine one token
      };
      Request r;
      r.id = static_cast<std::int64_t>(out.size());
      r.trace_row = line_no;
      const auto [when, unit] = number({"arrival_s", "timestamp"}, "arrival");
      double t = unit == "timestamp" ? when / 1000.0 : when;  // Mooncake's timestamps are milliseconds
      if (unit == "timestamp") {
        if (out.empty()) origin = t;
        t -= origin;  // rebased to the first request
      }
      if (t < 0) fail(line_no, 1, "the arrival " + std::to_string(when) + " is negative");
      if (!out.empty() && t < previous) fail(line_no, 1, "the arrival is earlier than the previous line's: sort the trace by arrival");
      previous = t;
      r.arrival_s = t;
      r.prompt_tokens = whole({"prompt_tokens", "input_length"}, "prompt length");
      r.output_tokens = whole({"output_tokens", "output_length"}, "output length");
      std::vector<std::int64_t> ids;
      if (row.contains("hash_ids")) {
        const nlohmann::json& h = row["hash_ids"];
        if (!h.is_array()) fail(line_no, 1, "'hash_ids' is not a list of block ids");
        for (const auto& id : h) {
          if (!id.is_number_integer() || id.get<std::int64_t>() < 0) fail(line_no, 1, "'hash_ids' holds something other than block ids");
          ids.push_back(id.get<std::int64_t>());
        }
      }
      blocks.push_back(std::move(ids));
      out.push_back(r);
    } while (std::getline(in, line));
    if (out.empty()) fail(line_no, 1, "the trace has no requests");
    share_prefixes(out, blocks);
    return out;
  }

  // Mooncake's hash_ids: a prompt's leading blocks that another request of the trace also starts
  // with are its shared prefix, in the group of its first block.
  static void share_prefixes(std::vector<Request>& requests, const std::vector<std::vector<std::int64_t>>& blocks) {
    constexpr int kBlockTokens = 512;  // Mooncake hashes every 512 tokens of a prompt
    auto prefix_keys = [](const std::vector<std::int64_t>& ids) {
      std::vector<std::uint64_t> keys;
      Fnv1a f;
      for (std::int64_t id : ids) {
        f.add(id);
        keys.push_back(f.value());
      }
      return keys;
    };
    std::unordered_map<std::uint64_t, int> requests_with;  // prefix -> requests that start with it
    for (const auto& ids : blocks)
      for (std::uint64_t k : prefix_keys(ids)) ++requests_with[k];
    std::map<std::int64_t, int> group_of_first_block;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const auto keys = prefix_keys(blocks[i]);
      std::size_t shared = 0;
      while (shared < keys.size() && requests_with[keys[shared]] > 1) ++shared;
      if (shared == 0) continue;
      const auto group = group_of_first_block.emplace(blocks[i][0], static_cast<int>(group_of_first_block.size())).first->second;
      requests[i].prefix_group = group;
      requests[i].prefix_tokens = static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(shared) * kBlockTokens,
                                                                          requests[i].prompt_tokens));
    }
  }

 private:
  std::string path_;
};

}  // namespace

std::vector<Request> read_trace(const std::string& path) { return TraceParser(path).read(); }

int fit_trace_to_context(std::vector<Request>& requests, const std::string& trace, int max_model_len) {
  int cut = 0;
  for (Request& r : requests) {
    if (r.prompt_tokens >= max_model_len) {
      throw ScenarioError({trace, r.trace_row, 1}, kKey,
                          "a " + std::to_string(r.prompt_tokens) + "-token prompt does not fit inference.serving."
                          "max_model_len (" + std::to_string(max_model_len) + "), which vLLM refuses: filter the trace "
                          "or raise max_model_len");
    }
    if (r.prompt_tokens + r.output_tokens > max_model_len) {
      r.output_tokens = max_model_len - r.prompt_tokens;
      ++cut;
    }
  }
  return cut;
}

void scale_trace_to_rate(std::vector<Request>& requests, const std::string& trace, double rate_per_s) {
  const double span = requests.empty() ? 0.0 : requests.back().arrival_s - requests.front().arrival_s;
  if (requests.size() < 2 || !(span > 0)) {
    throw ScenarioError({trace, 0, 0}, "inference.workload.rate",
                        "the trace's arrivals all fall at one instant, so it has no rate to replay at another");
  }
  const double own_rate = static_cast<double>(requests.size() - 1) / span;
  const double factor = own_rate / rate_per_s;
  const double first = requests.front().arrival_s;
  for (Request& r : requests) r.arrival_s = first + (r.arrival_s - first) * factor;
}

std::vector<double> read_lengths(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw ScenarioError({path, 0, 0}, key, path + " is not a regular file");
  std::ifstream in(path);
  std::vector<double> values;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    const auto v = parse_plain_number(line);
    if (!v || !std::isfinite(*v) || *v <= 0) {
      throw ScenarioError({path, line_no, 1}, key, "'" + line + "' is not a positive number of tokens");
    }
    if (values.size() >= static_cast<std::size_t>(kMaxTraceRows)) {
      throw ScenarioError({path, line_no, 1}, key, "more than " + std::to_string(kMaxTraceRows) + " lengths");
    }
    values.push_back(*v);
  }
  if (values.empty()) throw ScenarioError({path, line_no, 0}, key, "no lengths in the file");
  return values;
}

std::vector<LengthPair> read_length_pairs(const std::string& path) {
  const char* key = "inference.workload.lengths";
  auto fail = [&](int line, int column, const std::string& message) { throw ScenarioError({path, line, column}, key, message); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(0, 0, path + " is not a regular file");
  std::ifstream in(path);
  if (!in) fail(0, 0, "cannot read the file");
  std::string header;
  std::getline(in, header);
  if (header.rfind("\xEF\xBB\xBF", 0) == 0) header.erase(0, 3);  // a UTF-8 byte-order mark
  const std::vector<Cell> names = split_row(header);
  auto column_of = [&](std::initializer_list<const char*> accepted, const char* what) {
    int found = -1;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (std::none_of(accepted.begin(), accepted.end(), [&](const char* n) { return names[i].text == n; })) continue;
      if (found >= 0) fail(1, names[i].column, "'" + names[i].text + "' repeats the " + what + " column ('" + names[static_cast<std::size_t>(found)].text + "'): keep one");
      found = static_cast<int>(i);
    }
    if (found < 0) {
      std::string list;
      for (const char* n : accepted) list += (list.empty() ? "" : ", ") + std::string(n);
      fail(1, 1, std::string("the header names no ") + what + " column (" + list + ")");
    }
    return static_cast<std::size_t>(found);
  };
  const std::size_t prompt = column_of({"prompt_tokens", "input_len", "input_length", "ContextTokens", "Request tokens"}, "prompt");
  const std::size_t output = column_of({"output_tokens", "output_len", "output_length", "GeneratedTokens", "Response tokens"}, "output");
  std::vector<LengthPair> pairs;
  int line_no = 1;
  auto tokens = [&](const Cell& c, const char* what) {
    const auto v = parse_plain_number(c.text);
    if (!v || !std::isfinite(*v) || std::floor(*v) != *v || *v < 0 || *v > kMaxTokens)
      fail(line_no, c.column, std::string(what) + " '" + c.text + "' is not a whole number of tokens in 0.." + std::to_string(kMaxTokens));
    return std::max(1, static_cast<int>(*v));
  };
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (pairs.size() >= static_cast<std::size_t>(kMaxTraceRows)) fail(line_no, 1, "more than " + std::to_string(kMaxTraceRows) + " pairs");
    const std::vector<Cell> cells = split_row(line);
    if (cells.size() <= std::max(prompt, output)) {
      fail(line_no, static_cast<int>(line.size()) + 1,
           "too few columns (" + std::to_string(cells.size()) + ", the header names " + std::to_string(names.size()) + ")");
    }
    pairs.push_back({tokens(cells[prompt], "the prompt length"), tokens(cells[output], "the output length")});
  }
  if (pairs.empty()) fail(line_no, 1, "the file has a header but no length pairs");
  return pairs;
}

void check_workload_files(const Inference& inference) {
  const WorkloadSpec& w = inference.workload;
  if (!w.trace.empty()) {
    std::vector<Request> requests = read_trace(w.trace);
    fit_trace_to_context(requests, w.trace, inference.serving.max_model_len);
    if (w.rate_per_s > 0) scale_trace_to_rate(requests, w.trace, w.rate_per_s);
  }
  if (!w.length_pairs.empty()) read_length_pairs(w.length_pairs);
  if (w.prompt_tokens.dist == LengthDist::empirical) read_lengths(w.prompt_tokens.file, "inference.workload.prompt_tokens.file");
  if (w.output_tokens.dist == LengthDist::empirical) read_lengths(w.output_tokens.file, "inference.workload.output_tokens.file");
}

}  // namespace memtwin

#include "models/scenario/calibration_collectives.h"

#include <algorithm>
#include <cmath>

#include "models/comm/collective_model.h"
#include "models/scenario/calibration.h"
#include "models/scenario/did_you_mean.h"
#include "models/unit_parse.h"

namespace memtwin {
namespace {

SourceLocation at(const std::string& path, const YAML::Node& node) {
  return {path, node.Mark().line + 1, node.Mark().column + 1};
}

}  // namespace

std::vector<MeasuredCollective> read_measured_collectives(const std::string& path, const YAML::Node& section) {
  const std::string key = "collectives.measured";
  const std::vector<std::string> known_sections = {"measured"};
  refuse_duplicate_keys(path, section, "collectives");
  for (auto entry = section.begin(); entry != section.end(); ++entry) {
    const std::string name = entry->first.Scalar();
    if (name != "measured") {
      throw ScenarioError(at(path, entry->first), "collectives." + name, "unknown calibration key" + did_you_mean(name, known_sections));
    }
  }
  const YAML::Node list = section["measured"];
  if (!list || !list.IsSequence()) {
    throw ScenarioError(at(path, section), key, "expected a list of {collective, ranks, nodes, latency, bus_bandwidth}");
  }
  std::vector<MeasuredCollective> out;
  const std::vector<std::string> fields = {"collective", "ranks", "nodes", "latency", "bus_bandwidth", "source"};
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) throw ScenarioError(at(path, item), item_key, "expected a mapping");
    refuse_duplicate_keys(path, item, item_key);
    for (auto f = item.begin(); f != item.end(); ++f) {
      const std::string field = f->first.Scalar();
      if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
        throw ScenarioError(at(path, f->first), item_key + "." + field, "unknown key" + did_you_mean(field, fields));
      }
    }
    auto required = [&](const char* field) {
      const YAML::Node n = item[field];
      if (!n || !n.IsScalar()) throw ScenarioError(at(path, item), item_key + "." + field, "is required");
      return n;
    };
    MeasuredCollective m;
    const YAML::Node kind = required("collective");
    const auto parsed = parse_collective(kind.Scalar());
    if (!parsed || *parsed == Collective::p2p_forward || *parsed == Collective::p2p_backward) {
      throw ScenarioError(at(path, kind), item_key + ".collective",
                          "'" + kind.Scalar() + "' is not one of all_reduce, all_gather, reduce_scatter, all_to_all");
    }
    m.collective = kind.Scalar();
    auto count = [&](const char* field, int& value) {
      const YAML::Node n = required(field);
      try {
        value = n.as<int>();
      } catch (const YAML::Exception&) {
        throw ScenarioError(at(path, n), item_key + "." + field, "expected a whole number");
      }
      if (value < 1) throw ScenarioError(at(path, n), item_key + "." + field, "must be at least 1");
    };
    count("ranks", m.ranks);
    count("nodes", m.nodes);
    if (m.ranks < 2 || m.ranks % m.nodes != 0) {
      throw ScenarioError(at(path, item["ranks"]), item_key + ".ranks",
                          "must be at least 2 and a multiple of nodes (" + std::to_string(m.nodes) + ")");
    }
    try {
      m.latency = parse_duration(required("latency").Scalar());
    } catch (const UnitError& e) {
      throw ScenarioError(at(path, item["latency"]), item_key + ".latency", e.what());
    }
    try {
      m.bus_bandwidth = parse_bandwidth(required("bus_bandwidth").Scalar());
    } catch (const UnitError& e) {
      throw ScenarioError(at(path, item["bus_bandwidth"]), item_key + ".bus_bandwidth", e.what());
    }
    if (!(m.bus_bandwidth.value() > 0) || !std::isfinite(m.bus_bandwidth.value())) {
      throw ScenarioError(at(path, item["bus_bandwidth"]), item_key + ".bus_bandwidth", "must be positive and finite");
    }
    if (!(m.latency.value() >= 0) || !std::isfinite(m.latency.value())) {
      throw ScenarioError(at(path, item["latency"]), item_key + ".latency", "must be finite and not negative");
    }
    m.source = item["source"] ? item["source"].Scalar() : path;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace memtwin

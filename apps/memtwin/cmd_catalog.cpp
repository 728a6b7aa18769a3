// memtwin schema / models / gpus
#include <iomanip>
#include <iostream>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "models/schema.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;

namespace memtwin::cli {

int cmd_schema(const Args& args) {
  po::options_description options("options");
  options.add_options()("markdown", po::bool_switch(), "print Markdown (the source of scenarios/SCHEMA.md)");
  auto vm = parse_args(args, options, {}, "usage: memtwin schema [--markdown]\n\nPrints every scenario key with its type, default and meaning.");
  if (!vm) return kOk;
  std::cout << ((*vm)["markdown"].as<bool>() ? schema_markdown() : schema_text());
  return kOk;
}

int cmd_models(const Args& args) {
  po::options_description options("options");
  auto vm = parse_args(args, options, {}, "usage: memtwin models\n\nLists the model catalog with each entry's source.");
  if (!vm) return kOk;
  std::cout << std::left << std::setw(16) << "name" << std::setw(10) << "params" << std::setw(8) << "layers"
            << std::setw(8) << "hidden" << std::setw(12) << "heads/kv" << std::setw(12) << "KV/token" << "source\n";
  for (const auto& name : catalog_model_names()) {
    ModelSpec m = catalog_model(name);
    std::string heads = std::to_string(m.heads) + "/" + std::to_string(m.kv_heads);
    std::cout << std::setw(16) << name << std::setw(10) << human_count(count_parameters(m).total) << std::setw(8)
              << m.layers << std::setw(8) << m.hidden << std::setw(12) << heads << std::setw(12)
              << human_bytes(kv_bytes_per_token(m, 2.0)) << m.source << "\n";
  }
  return kOk;
}

int cmd_gpus(const Args& args) {
  po::options_description options("options");
  auto vm = parse_args(args, options, {}, "usage: memtwin gpus\n\nLists the GPU catalog with each entry's source.");
  if (!vm) return kOk;
  std::cout << std::left << std::setw(11) << "name" << std::setw(11) << "memory" << std::setw(11) << "HBM"
            << std::setw(13) << "bf16 dense" << std::setw(12) << "NVLink" << std::setw(10) << "PCIe" << std::setw(8)
            << "$/h" << "source\n";
  for (const auto& name : catalog_gpu_names()) {
    GpuSpec g = catalog_gpu(name);
    std::string bf16 = g.flops.count(Precision::bf16) ? format_flops_rate(g.flops.at(Precision::bf16)) : "-";
    std::string nvlink = g.nvlink_bandwidth ? human_bandwidth(*g.nvlink_bandwidth) : "-";
    std::ostringstream price;
    if (g.price_per_hour) price << std::fixed << std::setprecision(2) << *g.price_per_hour;
    std::cout << std::setw(11) << name << std::setw(11) << human_bytes(g.memory) << std::setw(11)
              << human_bandwidth(g.hbm_bandwidth) << std::setw(13) << bf16 << std::setw(12) << nvlink << std::setw(10)
              << human_bandwidth(g.pcie_bandwidth) << std::setw(8) << price.str() << g.source << "\n";
  }
  return kOk;
}

}  // namespace memtwin::cli

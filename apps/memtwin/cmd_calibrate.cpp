// memtwin calibrate: measures a device and writes the calibration file the simulator reads
// (`cluster.calibration: FILE`), so that its predictions are checked against this machine.
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/rank_launcher.h"
#include "hw/cuda/cuda_device.h"
#include "hw/host/host_calibration.h"
#include "hw/host/mpi_collectives.h"
#include "models/comm/nccl_tests.h"
#include "models/kv/kv_method.h"
#include "models/scenario/scenario_error.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string calibration_yaml(const hw::DeviceCalibration& c, const std::string& command) {
  std::ostringstream y;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  y << "# memtwin calibration: " << command << " (" << date << ")\n"
    << "# " << c.method << "\n"
    << "device: " << c.device << "\n"
    << "gpu:\n"
    << "  flops: {" << c.gemm_precision << ": " << number("%.4g", c.gemm_best_flops / 1e9) << "GFLOPS";
  if (c.fp32_flops > 0) y << ", fp32: " << number("%.4g", c.fp32_flops / 1e9) << "GFLOPS";
  y << "}   # best GEMM rates over transformer shapes\n"
    << "  hbm_bandwidth: " << number("%.4g", c.stream_bytes_per_s / 1e9) << "GB/s   # device memory traffic (read + write) per rank\n"
    << "efficiency:\n"
    << "  gemm: " << number("%.3f", c.gemm_median_flops / c.gemm_best_flops) << "   # median GEMM rate / best\n"
    << "  gemm_by_rows:   # " << c.gemm_rows_method << "\n";
  for (const auto& [rows, rate] : c.gemm_median_by_rows) y << "    " << rows << ": " << number("%.3f", rate / c.gemm_best_flops) << "\n";
  y
    << "  attention: " << number("%.3f", std::min(1.0, c.attention_median_flops / c.gemm_best_flops))
    << "   # median rate of per-head score and value products / best GEMM\n"
    << "  memory: 1   # hbm_bandwidth above is the measured rate itself\n"
    << "  gemm_memory: " << number("%.3f", std::min(1.0, c.weight_streaming_bytes_per_s / c.stream_bytes_per_s))
    << "   # " << c.weight_streaming_method << "\n";
  if (!c.weight_gemm_by_rows.empty()) {
    y << "  gemm_memory_by_rows:   # weight GEMMs from DRAM timed whole, by rows: weight bytes per second / hbm_bandwidth\n";
    for (const auto& [rows, rate] : c.weight_gemm_by_rows)
      y << "    " << rows << ": " << number("%.4g", std::min(1.0, rate / c.stream_bytes_per_s)) << "\n";
  }
  if (!c.weight_gemm_by_shape.empty()) {
    y << "  gemm_memory_by_shape:   # the same per weight shape INNERxOUTPUTS (a serving GEMM takes the nearest)\n";
    for (const auto& [shape, by_rows] : c.weight_gemm_by_shape) {
      y << "    " << shape.first << "x" << shape.second << ": {";
      for (std::size_t i = 0; i < by_rows.size(); ++i) {
        y << (i ? ", " : "") << by_rows[i].first << ": " << number("%.4g", std::min(1.0, by_rows[i].second / c.stream_bytes_per_s));
      }
      y << "}\n";
    }
  }
  if (c.gemm_overlap >= 0) {
    y << "  gemm_overlap: " << number("%.2f", c.gemm_overlap) << "   # " << c.gemm_overlap_method << "\n";
  }
  y << "host:\n"
    << "  pcie_bandwidth: " << number("%.4g", c.copy_bytes_per_s / 1e9) << "GB/s   # " << c.copy_method << "\n";
  if (c.adam_params_per_s > 0) {
    y << "  cpu_adam_params_per_s: " << number("%.4g", c.adam_params_per_s * c.ranks) << "   # per node: per-rank Adam rate x ranks\n";
  }
  if (c.nvme_write_bytes_per_s > 0) {
    y << "nvme:   # per node: a rank's O_DIRECT file I/O rate with every rank at it, x ranks (MEMTWIN_NVME_DIR's disk)\n"
      << "  read_bandwidth: " << number("%.4g", c.nvme_read_bytes_per_s * c.ranks / 1e9) << "GB/s\n"
      << "  write_bandwidth: " << number("%.4g", c.nvme_write_bytes_per_s * c.ranks / 1e9) << "GB/s\n";
  }
  if (c.ranks > 1) {
    y << "intra_node:\n"
      << "  bandwidth: " << number("%.4g", c.collective_bus_bytes_per_s / 1e9)
      << "GB/s   # all-gather bus bandwidth (nccl-tests' busbw) at the largest size\n"
      << "  latency: " << number("%.4g", c.collective_step_latency_s * 1e6) << "us   # per ring step, from the smallest all-gather\n";
  }
  y << "kernels:\n  decode_attention:   # cached K and V elements per second, by the batch's cached bytes\n";
  for (std::size_t i = 0; i < c.decode_attention.size(); ++i) {
    const auto& d = c.decode_attention[i];
    if (i == 0 || c.decode_attention[i - 1].what != d.what) y << "    " << d.what << ": {";
    y << format_bytes(Bytes(static_cast<std::int64_t>(d.size))) << ": " << number("%.4g", d.rate);
    y << (i + 1 == c.decode_attention.size() || c.decode_attention[i + 1].what != d.what ? "}\n" : ", ");
  }
  y << "  kv_write:   # new tokens' K and V elements quantised and written into the paged cache per second\n";
  for (const auto& d : c.kv_write) y << "    " << d.what << ": " << number("%.4g", d.rate) << "\n";
  if (c.prompt_scoring_pairs_per_s > 0) {
    y << "  prompt_scoring: " << number("%.4g", c.prompt_scoring_pairs_per_s)
      << "   # prompt scores of accumulated-score eviction (" << kv_method_names(KvSelection::accumulated_scores)
      << "): causal query-key pairs x query heads per second, one layer\n";
  }
  y << "runtime:\n"
    << "  cuda_context: " << format_bytes(Bytes(c.runtime_bytes)) << "   # " << c.runtime_method << "\n";
  if (c.host_device) {
    y << "  nccl_buffers: 0B   # the collectives' staging buffers are counted above\n"
      << "  framework_overhead: 0B\n"
      << "  cuda_graph_pool: 0B\n";
  }
  y << "# measurements (size, seconds per call, rate):\n";
  auto samples = [&](const char* what, const std::vector<hw::RateSample>& v, double unit, const char* unit_name) {
    for (const auto& s : v)
      y << "#   " << what << " " << s.what << ": " << number("%.4g", s.seconds * 1e3) << " ms, "
        << number("%.4g", s.rate / unit) << " " << unit_name << "\n";
  };
  samples("", c.gemm, 1e9, "GFLOP/s");
  samples("", c.attention, 1e9, "GFLOP/s");
  samples("weights", c.weight_streaming, 1e9, "GB/s");
  samples("", c.collectives, 1e9, "GB/s bus");
  y << "# correctness: " << c.wrong_results << " wrong result(s)\n";
  return y.str();
}

// A file's text, refusing what is not a regular file or is larger than any nccl-tests output.
std::string read_text_file(const std::string& path) {
  constexpr std::streamsize kLimit = 64 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in || !std::filesystem::is_regular_file(path)) throw ScenarioError({path, 0, 0}, "", "cannot read this file (not a regular file)");
  std::string text(static_cast<std::size_t>(kLimit) + 1, '\0');
  in.read(text.data(), kLimit + 1);
  if (in.gcount() > kLimit) throw ScenarioError({path, 0, 0}, "", "larger than 64 MiB: not an nccl-tests output");
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// `memtwin calibrate --nccl-tests FILE...`: one fitted collective per file.
int calibrate_from_nccl_tests(const std::vector<std::string>& files, const std::string& out) {
  std::ostringstream y;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  y << "# memtwin calibration: memtwin calibrate --nccl-tests (" << date << ")\n"
    << "# each entry: nccl-tests' out-of-place times fitted to latency + bytes x bus factor / bus_bandwidth\n"
    << "collectives:\n  measured:\n";
  std::ostringstream report;
  for (const auto& path : files) {
    const NcclTestsFit fit = fit_nccl_tests(parse_nccl_tests(path, read_text_file(path)));
    const auto& m = fit.measured;
    y << "    - {collective: " << m.collective << ", ranks: " << m.ranks << ", nodes: " << m.nodes
      << ", latency: " << number("%.4g", m.latency.value() * 1e6) << "us, bus_bandwidth: "
      << number("%.4g", m.bus_bandwidth.value() / 1e9) << "GB/s, source: \"" << m.source << "\"}   # " << fit.points
      << " sizes, rms error " << number("%.1f", 100 * fit.rms_relative_error) << "%\n";
    report << "  " << m.collective << " over " << m.ranks << " ranks on " << m.nodes << " node(s): latency "
           << number("%.1f", m.latency.value() * 1e6) << " us, bus bandwidth " << number("%.1f", m.bus_bandwidth.value() / 1e9)
           << " GB/s (" << fit.points << " sizes, rms error " << number("%.1f", 100 * fit.rms_relative_error) << "%) from "
           << path << "\n";
  }
  std::ofstream file(out);
  file << y.str();
  if (!file) throw std::runtime_error("cannot write " + out);
  std::cout << "wrote " << out << ":\n" << report.str();
  return kOk;
}

}  // namespace

int cmd_calibrate(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("device", po::value<std::string>()->default_value("host"), "device to measure: host or cuda")
      ("ranks", po::value<int>()->default_value(2), "host: ranks measured at once (one per \"GPU\" of the scenarios to check); cuda: 1")
      ("min-time", po::value<double>()->default_value(0.2), "least seconds each timed measurement runs")
      ("nccl-tests", po::value<std::vector<std::string>>()->multitoken(),
       "fit the collective model to nccl-tests outputs (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
       "alltoall_perf; one file per run) instead of measuring a device")
      ("out", po::value<std::string>(), "calibration file to write (YAML)");
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin calibrate --device host|cuda [--ranks N] [--min-time S] --out FILE.yaml\n"
                       "       memtwin calibrate --nccl-tests FILE... --out FILE.yaml\n\n"
                       "Measures GEMM and attention throughput, memory and copy bandwidth, the KV kernels,\n"
                       "Adam's update rate and collective bandwidth the nccl-tests way (warm-up, timed\n"
                       "repeats, correctness count), with every rank busy at once, and writes a calibration\n"
                       "file; scenarios use it with `cluster.calibration: FILE.yaml`.");
  if (!vm) return kOk;
  if (vm->count("nccl-tests")) {
    if (!vm->count("out")) throw UsageError("--out FILE.yaml is required");
    return calibrate_from_nccl_tests((*vm)["nccl-tests"].as<std::vector<std::string>>(), (*vm)["out"].as<std::string>());
  }
  const std::string device = (*vm)["device"].as<std::string>();
  if (device != "host" && device != "cuda") throw UsageError("unknown device '" + device + "'; devices: host, cuda");
  if (!vm->count("out")) throw UsageError("--out FILE.yaml is required");
  const int ranks = device == "cuda" && (*vm)["ranks"].defaulted() ? 1 : (*vm)["ranks"].as<int>();
  const double min_seconds = (*vm)["min-time"].as<double>();
  if (ranks < 1) throw UsageError("--ranks must be at least 1");
  if (device == "cuda" && ranks != 1) {
    throw UsageError("--device cuda calibrates one GPU (--ranks 1); collectives between GPUs are not measured yet "
                     "(scripts/gpu/probe.sh measures an NCCL communicator's memory)");
  }
  if (!(min_seconds > 0)) throw UsageError("--min-time must be positive");
  const std::string out = (*vm)["out"].as<std::string>();
  const std::string command = "memtwin calibrate --device " + device + " --ranks " + std::to_string(ranks) + " --min-time " +
                              number("%g", min_seconds);

  if (!under_mpi_launcher() && ranks > 1) {
    Launched run = launch_ranks(ranks, {"calibrate", "--device", device, "--ranks", std::to_string(ranks), "--min-time",
                                        number("%g", min_seconds), "--out", out});
    std::cout << run.out;
    return run.exit_code;
  }
  const hw::DeviceCalibration c = device == "cuda" ? hw::cuda_device().calibrate(hw::cuda_device().select_device(), min_seconds)
                                                    : hw::calibrate_host(min_seconds);
  if (hw::MpiSession::get().rank != 0) return kOk;
  std::ofstream file(out);
  file << calibration_yaml(c, command);
  if (!file) throw std::runtime_error("cannot write " + out);
  std::cout << "wrote " << out << ": " << c.device << "\n"
            << "  " << c.gemm_precision << " GEMM best " << number("%.1f", c.gemm_best_flops / 1e9) << " GFLOP/s, median "
            << number("%.1f", c.gemm_median_flops / 1e9) << "; attention median " << number("%.1f", c.attention_median_flops / 1e9)
            << " GFLOP/s\n"
            << "  memory stream " << number("%.2f", c.stream_bytes_per_s / 1e9) << " GB/s, copy "
            << number("%.2f", c.copy_bytes_per_s / 1e9) << " GB/s, weights read by batch-1..8 GEMMs "
            << number("%.2f", c.weight_streaming_bytes_per_s / 1e9) << " GB/s; Adam "
            << (c.adam_params_per_s > 0 ? number("%.3g", c.adam_params_per_s) + " params/s per rank\n" : std::string("not measured\n"));
  if (c.ranks > 1) {
    std::cout << "  all-gather bus bandwidth " << number("%.2f", c.collective_bus_bytes_per_s / 1e9) << " GB/s, "
              << number("%.1f", c.collective_step_latency_s * 1e6) << " us per ring step\n";
  }
  std::cout << "  runtime " << human_bytes(Bytes(c.runtime_bytes)) << " per rank; " << c.wrong_results
            << " wrong result(s)\n";
  return c.wrong_results == 0 ? kOk : kInternalError;
}

}  // namespace memtwin::cli

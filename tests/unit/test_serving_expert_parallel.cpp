// Serving with expert parallelism (inference.serving.expert_parallel): the memory model's share of
// the experts, the iteration model's group, and the simulator's replicas stepping together.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "models/memory/serving_memory.h"
#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/iteration_plan.h"
#include "tests/test_support.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;
using test::run_memtwin;
using test::serve;
using test::source_path;

namespace {

const std::string kMixtralEp8 = "scenarios/serving/mixtral-8x7b-ep8-h100.yaml";

Scenario load(const std::vector<std::string>& sets) { return load_scenario_file(source_path(kMixtralEp8), sets).scenario; }

}  // namespace

TEST_CASE("expert parallelism gives each GPU its share of the experts whole, and every GPU the attention", "[unit]") {
  const Scenario s = load({});
  const ModelSpec& m = s.model;
  const ParameterCount c = count_parameters(m);
  const double experts = static_cast<double>(m.layers) * m.experts * 3.0 * m.hidden * m.intermediate;
  // bf16: everything but the experts on every GPU, one eighth of the experts.
  const double expected = 2.0 * (c.total - experts) + 2.0 * experts / 8;
  const ServingMemory ep = serving_memory(s);
  CHECK(ep.weights.as_double() == Approx(expected).epsilon(1e-3));
  CHECK(ep.fits);
  // The same eight GPUs as one tensor-parallel replica hold an eighth of everything instead.
  const ServingMemory tp8 = serving_memory(load({"inference.serving.expert_parallel=false", "inference.serving.replicas=1",
                                                 "inference.serving.tensor_parallel=8"}));
  CHECK(tp8.weights.as_double() < ep.weights.as_double());
  // A whole expert per GPU: its GEMMs have the expert's full shape, not a tensor slice of it.
  const auto ops = IterationPlan(s).signatures(op_bit(IterationOp::weight_gemm));
  CHECK(ops.count("weight_gemm 4096x" + std::to_string(2 * m.intermediate)) == 1);
  CHECK(ops.count("weight_gemm " + std::to_string(m.intermediate) + "x4096") == 1);
}

TEST_CASE("an idle expert-parallel group: a lone request's prefill and decode, the others' dummy batches, the token exchange",
          "[unit]") {
  const std::vector<std::string> sets = {"inference.workload.rate=0.05/s", "inference.workload.requests=4",
                                         "inference.workload.prompt_tokens=1000", "inference.workload.output_tokens=20"};
  auto doc = serve(kMixtralEp8, sets);
  const Scenario s = load(sets);
  const IterationModel model(s);
  // The all-gathers and reduce-scatters run as flows on idle NVLink: exactly the collective model's time.
  CHECK(doc["latency_s"]["ttft"]["p50"].get<double>() == Approx(model.prefill_alone(1000)).epsilon(1e-6));
  CHECK(doc["latency_s"]["tpot"]["p50"].get<double>() == Approx(model.decode_alone(1010)).epsilon(1e-3));
  // The exchange costs time: more than the kernels alone.
  IterationLoad prefill{1000, 1000 * 500.0, 0, 1};
  prefill.expert_group_tokens = 1000 + 7;
  CHECK(model.prefill_alone(1000) > model.compute_seconds(prefill));
  CHECK(model.ep_collectives() == s.model.layers);
}

TEST_CASE("replicas of an expert-parallel group step together: one replica's prefill holds up the other's decodes", "[unit]") {
  // Replica 0 decodes a short request; half a second later replica 1 prefills an 8000-token prompt.
  const std::string both = "/tmp/memtwin-test-ep-both.csv", first = "/tmp/memtwin-test-ep-first.csv";
  std::ofstream(both) << "arrival_s,prompt_tokens,output_tokens\n0,100,200\n0.5,8000,1\n";
  std::ofstream(first) << "arrival_s,prompt_tokens,output_tokens\n0,100,200\n";
  auto decode_time = [](const std::vector<std::string>& sets, const std::string& trace) {
    auto all = sets;
    for (const char* s : {"cluster.gpus_per_node=2", "inference.serving.replicas=2", "inference.serving.router=round_robin",
                          "inference.workload.prompt_tokens=null", "inference.workload.output_tokens=null",
                          "inference.workload.rate=null", "inference.workload.requests=null", "inference.workload.arrival=null"})
      all.emplace_back(s);
    all.push_back("inference.workload.trace=" + trace);
    const std::string dir = "/tmp/memtwin-test-ep-run";
    serve(kMixtralEp8, all, dir);
    std::ifstream in(dir + "/requests.csv");
    std::string line;
    std::getline(in, line);
    std::getline(in, line);  // request 0
    std::stringstream ss(line);
    std::vector<double> v;
    for (std::string cell; std::getline(ss, cell, ',');) v.push_back(std::stod(cell));
    return v.at(6) - v.at(5);  // finish - first token
  };
  // Together, every step of replica 0's decode while replica 1 prefills lasts as long as the prefill.
  const double ep_alone = decode_time({}, first), ep_both = decode_time({}, both);
  INFO("expert parallel: decode alone " << ep_alone << " s, beside the prefill " << ep_both << " s");
  CHECK(ep_both > 1.05 * ep_alone);
  // Independent replicas (each holding every expert, so on H200s) do not wait for each other.
  const std::vector<std::string> apart = {"inference.serving.expert_parallel=false", "cluster.gpu=h200"};
  CHECK(decode_time(apart, both) == Approx(decode_time(apart, first)).epsilon(1e-9));
}

TEST_CASE("expert parallelism is refused where it cannot run, naming the key", "[unit]") {
  auto refused = [](const std::vector<std::string>& sets, const std::string& says) {
    std::vector<std::string> args = {"run", source_path(kMixtralEp8), "--backend", "sim"};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    const auto r = run_memtwin(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("inference.serving.expert_parallel") != std::string::npos);
    CHECK(r.err.find(says) != std::string::npos);
  };
  refused({"model=llama-3-8b"}, "dense model");
  refused({"inference.serving.replicas=4", "inference.serving.pipeline_parallel=2"}, "pipeline stages");
  refused({"inference.serving.replicas=3"}, "does not divide the model's 8 experts");
}

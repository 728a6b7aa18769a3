#include "sim/sim_backend.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "models/analytic/memory_report.h"
#include "models/analytic/model_report.h"
#include "models/hash.h"
#include "models/memory/training_memory.h"
#include "models/plan/step_trace.h"
#include "models/plan/training_plan.h"
#include "models/unit_parse.h"
#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/disaggregation.h"
#include "models/serving/iteration_plan.h"
#include "models/serving/serving_report.h"
#include "models/validation/prediction_interval.h"
#include "sim/job_simulation.h"
#include "sim/serving_simulation.h"
#include "sim/disaggregated_serving.h"
#include "sim/step_simulation.h"

namespace memtwin {
namespace {

// What a serving run executed, as 16 hex digits: its request stream, KV geometry and limits
// (serving_plan_hash) and the ops its iterations ran.
std::string serving_run_hash(const Scenario& s, const std::set<std::string>& ops) {
  const ServingMemory memory = serving_memory(s);
  return iteration_plan_hash(serving_plan_hash(s, generate_requests(*s.inference, s.seed), memory.capacity_blocks,
                                               memory.block_bytes.as_double()),
                             ops);
}
// The ops a serving run's iterations ran: a colocated deployment's, or a disaggregated one's two
// sides' (each at its own tensor parallelism; `run` is the decode side's).
std::set<std::string> served_ops(const Scenario& s, IterationOpKinds kinds, IterationOpKinds prefill_kinds = 0) {
  if (!s.inference->disaggregation) return IterationPlan(s).signatures(kinds);
  std::set<std::string> ops = IterationPlan(instance_scenario(s, InstanceRole::decode)).signatures(kinds);
  ops.merge(IterationPlan(instance_scenario(s, InstanceRole::prefill)).signatures(prefill_kinds));
  return ops;
}

class SimBackend final : public Backend {
  RunResult run_serving(const Scenario& s) {
    RunResult r;
    r.backend = name();
    r.metrics["model"] = model_report(s);
    const ServingMemory memory = serving_memory(s);
    add_serving_memory(r.metrics, r.notes, s, memory);
    r.fits = memory.fits;
    if (!memory.fits) return r;  // nothing to serve: the memory result says why
    // Shared by the files' writers, which run only if a run directory is written.
    std::shared_ptr<const ServingRun> run;
    std::set<std::string> ops;
    if (s.inference->disaggregation) {
      sim::DisaggregatedRun both = sim::simulate_disaggregated_serving(s, progress_);
      r.metrics["disaggregation"] = disaggregation_report(s, both.run, both.prefill_run);
      r.metrics["disaggregation"]["links"] = link_load_summary(both.link_load);
      r.files["link_utilization.csv"] = [load = std::make_shared<const LinkLoad>(std::move(both.link_load))] { return link_load_csv(*load); };
      // Each side's ops at its own tensor parallelism; every GPU's work, both sides'.
      ops = served_ops(s, both.run.planned_op_kinds, both.prefill_run.planned_op_kinds);
      both.run.op_seconds += both.prefill_run.op_seconds;
      run = std::make_shared<const ServingRun>(std::move(both.run));
    } else {
      run = std::make_shared<const ServingRun>(sim::simulate_serving(s, progress_));
      ops = served_ops(s, run->planned_op_kinds);
    }
    add_serving_results(r.metrics, r.notes, s, *run);
    r.metrics["simulated"] = {{"replicas", s.inference->serving.replicas}, {"iterations", run->iterations},
                              {"requests", static_cast<std::int64_t>(run->requests.size())},
                              {"plan_hash", serving_run_hash(s, ops)},
                              {"iteration_ops", ops}};
    r.files["requests.csv"] = [run, disaggregated = s.inference->disaggregation.has_value()] { return requests_csv(*run, disaggregated); };
    r.files["kv_timeline.csv"] = [run] {
      std::ostringstream kv;
      kv << "time_s,replica,kv_utilization,host_swap_out_bytes,host_swap_in_bytes,prefix_to_host_bytes,"
            "prefix_from_host_bytes,prefix_from_nvme_bytes,prefix_to_nvme_bytes,host_tier_bytes,nvme_tier_bytes\n";
      kv.precision(9);
      for (const auto& k : run->kv_timeline) {
        kv << k.time_s << ",0," << k.utilization << "," << k.swap_out_bytes << "," << k.swap_in_bytes << ","
           << k.prefix_to_host_bytes << "," << k.prefix_from_host_bytes << "," << k.prefix_from_nvme_bytes << ","
           << k.prefix_to_nvme_bytes << "," << k.host_tier_bytes << "," << k.nvme_tier_bytes << "\n";
      }
      return kv.str();
    };
    r.files["trace.json"] = [run] { return serving_trace(*run); };
    return r;
  }

 public:
  std::string name() const override { return "sim"; }
  std::string summary() const override {
    return "SimGrid discrete-event simulation: one training step, or a serving run under its request load";
  }

  // Jobs on one shared cluster: each job alone and together, and the slow-down.
  RunResult run_jobs(const Scenario& s) {
    RunResult r;
    r.backend = name();
    r.fits = true;
    std::vector<std::optional<Plan>> plans(s.jobs.size());
    std::vector<sim::PlacedJob> placed;
    for (std::size_t i = 0; i < s.jobs.size(); ++i) {
      const Scenario& own = *s.jobs[i].scenario;
      if (own.training) plans[i] = build_training_plan(own);  // a serving job fits its GPUs (the loader checks)
      placed.push_back({&own, plans[i] ? &*plans[i] : nullptr, s.jobs[i].placement(s.cluster)});
    }
    const sim::JobSteps steps = sim::simulate_jobs(s, placed);
    Fnv1a together;  // the plans that ran together, each under its job's name
    for (std::size_t i = 0; i < s.jobs.size(); ++i) {
      const JobSpec& job = s.jobs[i];
      const Scenario& own = *job.scenario;
      const sim::JobOutcome& o = steps.jobs[i];
      nlohmann::ordered_json j;
      j["scenario"] = own.name;
      j["workload"] = workload_name(own);
      j["gpus"] = own.cluster.total_gpus();
      j["nodes"] = {job.first_node, job.first_node + own.cluster.nodes - 1};
      j["gpus_of_each_node"] = {job.first_gpu, job.first_gpu + own.cluster.gpus_per_node - 1};
      std::string hash;
      if (own.training) {
        j["step_s"] = {{"alone", o.alone.step_s}, {"together", o.together.step_s}};
        j["slowdown"] = o.together.step_s / o.alone.step_s;
        j["comm_busy_s"] = {{"alone", o.alone.comm_busy_s}, {"together", o.together.comm_busy_s}};
        j["steps_together"] = o.steps_together;
        hash = plans[i]->hash_hex();
        const bool oom = o.alone.oom || o.together.oom;
        r.fits = r.fits && !oom;
        if (oom) r.notes.push_back("job '" + job.name + "' runs out of memory: run its scenario alone for the report");
      } else {
        // The serving report's own figures, alone and together.
        nlohmann::ordered_json alone, with_others;
        std::vector<std::string> unused;
        add_serving_results(alone, unused, own, *o.served_alone);
        add_serving_results(with_others, unused, own, *o.served_together);
        for (const char* latency : {"ttft", "tpot", "e2e"}) {
          j[std::string(latency) + "_s"] = {{"alone", alone["latency_s"][latency]}, {"together", with_others["latency_s"][latency]}};
        }
        j["output_tokens_per_s"] = {{"alone", alone["throughput"]["output_tokens_per_s"]},
                                    {"together", with_others["throughput"]["output_tokens_per_s"]}};
        j["fraction_meeting_slo"] = {{"alone", alone["goodput"]["fraction_meeting_slo"]},
                                     {"together", with_others["goodput"]["fraction_meeting_slo"]}};
        const double mean_alone = alone["latency_s"]["e2e"].is_null() ? 0.0 : alone["latency_s"]["e2e"]["mean"].get<double>();
        const double mean_together = with_others["latency_s"]["e2e"].is_null() ? 0.0 : with_others["latency_s"]["e2e"]["mean"].get<double>();
        j["slowdown"] = mean_alone > 0 ? mean_together / mean_alone : 1.0;
        hash = serving_run_hash(own, served_ops(own, o.served_together->planned_op_kinds, o.prefill_op_kinds));
      }
      j["plan_hash"] = hash;
      r.metrics["jobs"][job.name] = j;
      together.add(job.name);
      together.add(hash);
    }
    // The links more than one job uses, and what they carried with the jobs together.
    r.metrics["shared_links"] = nlohmann::ordered_json::array();
    for (const auto& link : steps.shared_links) {
      nlohmann::ordered_json names = nlohmann::ordered_json::array();
      for (std::size_t j : link.jobs) names.push_back(s.jobs[j].name);
      r.metrics["shared_links"].push_back(
          {{"link", link.link}, {"direction", link.direction}, {"jobs", names}, {"bytes", link.bytes}, {"utilization", link.utilization}});
    }
    r.files["link_utilization.csv"] = [load = std::make_shared<const LinkLoad>(steps.together_load)] { return link_load_csv(*load); };
    r.metrics["simulated"] = {{"jobs", s.jobs.size()},
                              {"fidelity", "full"},
                              {"phases", "each job alone, then all together"},
                              {"plan_hash", together.hex()}};
    return r;
  }

  RunResult run(const Scenario& s) override {
    if (!s.jobs.empty()) return run_jobs(s);
    if (!s.training) return run_serving(s);
    const Plan plan = build_training_plan(s);
    sim::StepSimulation step = sim::simulate_step(s, plan, sim::kTracedRanks, progress_);
    RunResult r;
    r.backend = name();
    r.metrics["model"] = model_report(s);

    // Memory from the timeline, with the analytic host/NVMe side and allocator waste.
    TrainingMemory m = training_memory(s);
    const auto category = [&](const char* c) {
      auto it = step.breakdown_at_peak.find(c);
      return Bytes(it == step.breakdown_at_peak.end() ? 0 : it->second);
    };
    m.parameters = category("parameters");
    m.gradients = category("gradients");
    m.optimizer_states = category("optimizer_states");
    m.activations = category("activations");
    m.buffers = category("buffers");
    m.runtime = category("runtime");
    m.fragmentation = Bytes(static_cast<std::int64_t>(
        std::ceil(s.cluster.runtime.allocator_waste * (m.activations + m.buffers).as_double())));
    m.peak = Bytes(step.peak_bytes) + m.fragmentation;
    m.gpu_fits = m.peak <= m.capacity && !step.oom;
    add_training_memory(r.metrics, r.notes, s, m);
    r.fits = m.fits();
    if (step.oom) {
      const auto& o = *step.oom;
      r.metrics["memory"]["gpu"]["out_of_memory"] = o.to_json();
      r.notes.push_back("would run out of memory at " + o.op + ": " + o.tensor + " needs " +
                        human_bytes(Bytes(o.requested)) + " with " + human_bytes(Bytes(o.in_use)) + " of " +
                        human_bytes(Bytes(o.capacity)) + " in use");
    }

    const Training& t = *s.training;
    const double tokens = static_cast<double>(t.global_batch) * t.seq_len;
    const double model_flops = model_flops_per_gpu_step(s);
    const auto& peak = s.cluster.gpu.flops.count(t.precision) ? s.cluster.gpu.flops.at(t.precision)
                                                               : s.cluster.gpu.flops.begin()->second;
    nlohmann::ordered_json time;
    time["step_s"] = step.step_s;
    time["tokens_per_s"] = tokens / step.step_s;
    time["tflops_per_gpu"] = model_flops / step.step_s / 1e12;
    time["mfu"] = model_flops / step.step_s / peak.value();
    time["compute_s"] = step.compute_busy_s;
    time["exposed_comm_s"] = std::max(0.0, step.step_s - step.compute_busy_s);
    time["comm_busy_s"] = step.comm_busy_s;
    if (t.target_tokens > 0) time["days_to_target"] = t.target_tokens / (tokens / step.step_s) / 86400;
    add_step_interval(time, r.notes, s, step.step_s, tokens);
    r.metrics["time"] = time;
    double total = 0;
    for (const auto& [kind, bytes] : step.comm_bytes_per_gpu) {
      r.metrics["communication"]["bytes_per_gpu"][kind] = bytes;
      total += bytes;
    }
    r.metrics["communication"]["bytes_per_gpu"]["total"] = total;
    r.metrics["simulated"] = {{"ranks", plan.ranks()},
                              {"simulated_ranks", step.simulated_ranks},
                              {"fidelity", std::string(kFidelityNames.name(step.fidelity))},
                              {"flows", step.flows},
                              {"activities", step.activities},
                              {"plan_hash", plan.hash_hex()},
                              {"plan", plan.description}};
    if (!step.fidelity_reason.empty()) r.metrics["simulated"]["fidelity_reason"] = step.fidelity_reason;
    if (s.simulation.fidelity == Fidelity::fast && step.simulated_ranks == plan.ranks() && s.cluster.nodes > 2) {
      r.notes.push_back("fidelity fast simulated every rank: it keeps two nodes of each pipeline stage, and here the "
                        "stages do not own whole nodes or span fewer than three");
    }
    const auto traced = std::make_shared<const sim::StepSimulation>(std::move(step));
    r.files["trace.json"] = [traced] { return perfetto_step_trace(traced->events, traced->memory_timeline); };
    r.files["timeline.csv"] = [traced] { return memory_timeline_csv(traced->memory_timeline); };
    return r;
  }
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend() { return std::make_unique<SimBackend>(); }

}  // namespace memtwin

// Several training and serving jobs on one cluster (`jobs:`): each job alone and together on one
// SimGrid platform, slower together only where the jobs share a link.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

const std::string kShared = "scenarios/jobs/two-fsdp-jobs-shared-nodes.yaml";
const std::string kOwn = "scenarios/jobs/two-fsdp-jobs-own-nodes.yaml";
const std::string kJob = "scenarios/jobs/llama3-8b-fsdp-2x4xh100.yaml";

// `memtwin run FILE --json` with these overrides (a path anywhere).
nlohmann::json run_file_json(const std::filesystem::path& file, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"run", file.string(), "--json"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const auto r = run_memtwin(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

// The same for a scenario of the source tree.
nlohmann::json run_json(const std::string& scenario, const std::vector<std::string>& sets = {}) {
  return run_file_json(source_path(scenario), sets);
}

// A jobs scenario in a temporary directory next to a copy of the job's scenario file.
std::string jobs_file(const std::string& jobs_yaml) {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-jobs-test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(source_path(kJob), dir / "job.yaml", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "short-serving.yaml") << "name: short-serving\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\n"
                                                "model: llama-3-8b\ninference:\n  engine: vllm\n  workload: {arrival: poisson, "
                                                "rate: 10/s, requests: 2, prompt_tokens: {dist: fixed, value: 64},\n"
                                                "             output_tokens: {dist: fixed, value: 4}}\n";
  std::ofstream(dir / "too-big.yaml") << "name: too-big\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\nmodel: llama-3.1-70b\n"
                                          "inference:\n  engine: vllm\n  workload: {arrival: poisson, rate: 1/s, requests: 10, prompt_tokens: {dist: fixed, value: 100},\n"
                                          "             output_tokens: {dist: fixed, value: 10}}\n";
  std::ofstream(dir / "nested.yaml") << "name: nested\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}\n"
                                         "jobs:\n  - {name: again, scenario: jobs.yaml}\n";
  std::ofstream(dir / "a100.yaml") << "name: a100-job\ncluster: {nodes: 1, gpus_per_node: 4, gpu: a100-80gb}\nmodel: llama-3-8b\n"
                                       "training: {global_batch: 8, seq_len: 2048}\n";
  std::ofstream(dir / "jobs.yaml") << "name: test-jobs\ncluster: {nodes: 2, gpus_per_node: 8, gpu: h100-sxm}\n" << jobs_yaml;
  return (dir / "jobs.yaml").string();
}

// A source-tree file copied to `to` with every occurrence of each text replaced (each must occur).
void copy_replacing(const std::string& from, const std::filesystem::path& to,
                    const std::vector<std::pair<std::string, std::string>>& replacements) {
  std::ifstream in(source_path(from));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [old_text, new_text] : replacements) {
    REQUIRE(text.find(old_text) != std::string::npos);
    for (std::size_t at = 0; (at = text.find(old_text, at)) != std::string::npos; at += new_text.size()) {
      text.replace(at, old_text.size(), new_text);
    }
  }
  std::ofstream(to) << text;
}

// A jobs scenario of the examples with every job moved from node 1 to node 0 (`first_node: 1` ->
// 0), run from a temporary directory beside copies of its jobs' files.
nlohmann::json run_on_nodes_0_and_1(const std::string& jobs_scenario, const std::vector<std::string>& job_files) {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-jobs-moved-test";
  std::filesystem::create_directories(dir);
  for (const std::string& job : job_files) copy_replacing(job, dir / std::filesystem::path(job).filename(), {});
  copy_replacing(jobs_scenario, dir / "moved.yaml", {{"first_node: 1", "first_node: 0"}});
  return run_file_json(dir / "moved.yaml");
}

}  // namespace

TEST_CASE("jobs sharing nodes' oversubscribed uplinks are each slower together than alone", "[unit]") {
  const auto shared = run_json(kShared);
  CHECK(shared["workload"] == "jobs");
  const double own_step = run_json(kJob)["time"]["step_s"].get<double>();
  for (const char* name : {"first", "second"}) {
    INFO(name);
    const auto& job = shared["jobs"][name];
    // Alone on the shared cluster's GPUs, the job takes what it takes on its own two nodes: a NIC
    // per GPU and an uplink of four NICs' bandwidth either way.
    CHECK(job["step_s"]["alone"].get<double>() == Approx(own_step).epsilon(1e-9));
    CHECK(job["slowdown"].get<double>() > 1.2);
    CHECK(job["step_s"]["together"].get<double>() == Approx(job["slowdown"].get<double>() * own_step).epsilon(1e-9));
    CHECK(job["comm_busy_s"]["together"].get<double>() > job["comm_busy_s"]["alone"].get<double>());
  }
  // What they share: both nodes' uplinks, both ways, busy most of the together phase.
  std::set<std::string> shared_links;
  for (const auto& link : shared["shared_links"]) {
    shared_links.insert(link["link"].get<std::string>() + " " + link["direction"].get<std::string>());
    CHECK(link["jobs"] == nlohmann::json::array({"first", "second"}));
    CHECK(link["utilization"].get<double>() > 0.5);
    CHECK(link["utilization"].get<double>() <= 1.0);
  }
  CHECK(shared_links == std::set<std::string>{"node0.uplink up", "node0.uplink down", "node1.uplink up", "node1.uplink down"});
}

TEST_CASE("jobs that share no link are as fast together as alone", "[unit]") {
  // On nodes of their own.
  const auto own = run_json(kOwn);
  // On the same nodes, whose uplinks carry all their NICs' bandwidth: each GPU's NIC is its own
  // and the uplink is no bottleneck, so nothing the jobs share limits them.
  const auto full_uplinks = run_json(kShared, {"cluster.inter_node.oversubscription=1"});
  CHECK(own["shared_links"].empty());
  // The uplinks are still shared, but each carries both jobs at under its bandwidth.
  REQUIRE(full_uplinks["shared_links"].size() == 4);
  for (const auto& link : full_uplinks["shared_links"]) CHECK(link["utilization"].get<double>() < 0.5);
  for (const auto* doc : {&own, &full_uplinks}) {
    for (const char* name : {"first", "second"}) {
      const auto& job = (*doc)["jobs"][name];
      // Equal to rounding: each phase starts at another instant of the one simulation.
      CHECK(job["step_s"]["together"].get<double>() == Approx(job["step_s"]["alone"].get<double>()).epsilon(1e-12));
      CHECK(job["slowdown"].get<double>() == Approx(1.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("a jobs scenario is refused where a job cannot be placed, naming the job's key", "[unit]") {
  auto check_refused = [](const std::string& jobs_yaml, const std::string& expected) {
    const auto r = run_memtwin({"check", jobs_file(jobs_yaml)});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(expected));
  };
  check_refused("jobs:\n  - {name: a, scenario: job.yaml}\n  - {name: b, scenario: job.yaml, first_gpu: 2}\n",
                "jobs[1].first_gpu: node 0's GPU 2 is job 'a''s already");
  check_refused("jobs:\n  - {name: a, scenario: job.yaml, first_node: 1}\n", "jobs[0].first_node: the job's 2 nodes from node 1 pass");
  check_refused("jobs:\n  - {name: a, scenario: job.yaml, first_gpu: 5}\n", "jobs[0].first_gpu");
  check_refused("jobs:\n  - {name: a, scenario: job.yaml, frist_node: 0}\n", "did you mean 'first_node'");
  check_refused("jobs:\n  - {name: a, scenario: job.yaml}\n  - {name: a, scenario: job.yaml, first_gpu: 4}\n",
                "another job is named 'a'");
  check_refused("jobs:\n  - {name: a, scenario: missing.yaml}\n", "no scenario file");
  // A serving job that cannot hold its weights and a KV cache has nothing to serve beside the others.
  check_refused("jobs:\n  - {name: a, scenario: too-big.yaml}\n", "too-big.yaml does not fit its GPUs (weights");
  // A job's file holding jobs of its own, here naming this file again: refused before it is loaded.
  check_refused("jobs:\n  - {name: a, scenario: nested.yaml}\n", "nested.yaml is itself a scenario of jobs");
  check_refused("jobs:\n  - {name: a, scenario: a100.yaml}\n", "the job runs on a100-80gb GPUs; the shared cluster's are h100-sxm");
  check_refused("jobs: []\n", "expected a list of jobs");
  check_refused("model: llama-3-8b\njobs:\n  - {name: a, scenario: job.yaml}\n", "has no model of its own");
  // The error names the file and line of the job.
  const auto r = run_memtwin({"check", jobs_file("jobs:\n  - {name: a, scenario: job.yaml, first_node: 3}\n")});
  CHECK_THAT(r.err, Catch::Contains("jobs.yaml:4:"));
  // Commands other than run refuse a jobs scenario (exit 2) rather than run it as one workload.
  const auto validate = run_memtwin({"validate", source_path(kShared)});
  CHECK(validate.exit_code == 2);
  CHECK_THAT(validate.err, Catch::Contains("scenario of jobs"));
  CHECK(run_memtwin({"run", source_path(kShared), "--backend", "analytic"}).exit_code == 2);
  const auto seeds = run_memtwin({"run", source_path(kShared), "--seeds", "2"});
  CHECK(seeds.exit_code == 2);
  CHECK_THAT(seeds.err, Catch::Contains("a scenario of jobs runs each job once, at its own file's seed"));
  // The resource pre-check weighs every job's step twice (alone and together) before it starts.
  const auto slow = run_memtwin({"run", source_path(kShared), "--set", "simulation.time_limit=1ms"});
  CHECK(slow.exit_code == 2);
  CHECK_THAT(slow.err, Catch::Contains("2 jobs, each alone then together") && Catch::Contains("fewer or smaller jobs"));
}

TEST_CASE("on a leaf-spine fabric, jobs are slower together only where they cross the same oversubscribed leaf uplinks", "[unit]") {
  const std::string across = "scenarios/jobs/two-fsdp-jobs-across-spine.yaml";
  const double own_step = run_json(kJob)["time"]["step_s"].get<double>();
  const auto crossing = run_json(across);
  std::set<std::string> shared;
  for (const auto& link : crossing["shared_links"]) shared.insert(link["link"].get<std::string>());
  CHECK(shared.count("leaf0.uplink") == 1);
  CHECK(shared.count("leaf1.uplink") == 1);
  for (const char* name : {"first", "second"}) {
    INFO(name);
    const auto& job = crossing["jobs"][name];
    // Alone, a job's four NICs per node fill a leaf's uplink (2 nodes x 8 NICs / 4) exactly.
    CHECK(job["step_s"]["alone"].get<double>() == Approx(own_step).epsilon(1e-9));
    CHECK(job["slowdown"].get<double>() > 1.2);
  }
  // The same two jobs on nodes 0 and 1, both on leaf 0: the spine is not on their paths, and the
  // nodes' own uplinks to their leaf are not oversubscribed.
  const auto one_leaf = run_on_nodes_0_and_1(across, {kJob});
  for (const char* name : {"first", "second"}) {
    INFO(name);
    CHECK(one_leaf["jobs"][name]["slowdown"].get<double>() == Approx(1.0).epsilon(1e-9));
  }
  for (const auto& link : one_leaf["shared_links"]) CHECK(link["link"].get<std::string>().rfind("leaf", 0) != 0);
}

TEST_CASE("a leaf-spine fabric: one node per leaf is fat-tree's uplink, one leaf for all is non-blocking, and its keys are checked", "[unit]") {
  auto step = [&](std::vector<std::string> sets) { return run_json(kJob, std::move(sets))["time"]["step_s"].get<double>(); };
  const double blocking = step({"cluster.inter_node.oversubscription=2"});
  const double open = step({});
  CHECK(blocking > 1.2 * open);
  CHECK(step({"cluster.inter_node.topology=leaf-spine", "cluster.inter_node.nodes_per_leaf=1", "cluster.inter_node.oversubscription=2"}) ==
        Approx(blocking).epsilon(1e-9));
  CHECK(step({"cluster.inter_node.topology=leaf-spine", "cluster.inter_node.nodes_per_leaf=2", "cluster.inter_node.oversubscription=2"}) ==
        Approx(open).epsilon(1e-9));
  const auto missing = run_memtwin({"run", source_path(kJob), "--set", "cluster.inter_node.topology=leaf-spine"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("cluster.inter_node.nodes_per_leaf"));
  const auto stray = run_memtwin({"run", source_path(kJob), "--set", "cluster.inter_node.nodes_per_leaf=2"});
  CHECK(stray.exit_code == 2);
  CHECK_THAT(stray.err, Catch::Contains("leaf-spine only"));
}

TEST_CASE("a serving job beside a training job: both slower together where they cross the same oversubscribed leaf uplinks, "
          "neither on one leaf", "[unit][heavy]") {
  const std::string beside = "scenarios/jobs/serving-beside-training-across-spine.yaml";
  const std::string serving_file = "scenarios/jobs/llama3-70b-tp8-serving-2x4xh100.yaml";
  const auto own = run_json(serving_file);
  const double own_step = run_json(kJob)["time"]["step_s"].get<double>();
  const auto crossing = run_json(beside);
  const auto& serving = crossing["jobs"]["serving"];
  const auto& training = crossing["jobs"]["training"];
  CHECK(serving["workload"] == "inference");
  CHECK(training["workload"] == "training");
  // Alone on its GPUs of the shared cluster, the serving job serves as on its own two nodes: the
  // same requests (its plan hash), the same latencies and throughput, to rounding (its run starts
  // later on the shared clock).
  CHECK(serving["plan_hash"] == own["simulated"]["plan_hash"]);
  for (const char* latency : {"ttft", "tpot", "e2e"}) {
    INFO(latency);
    for (const char* stat : {"mean", "p50", "p99"}) {
      CHECK(serving[std::string(latency) + "_s"]["alone"][stat].get<double>() ==
            Approx(own["latency_s"][latency][stat].get<double>()).epsilon(1e-9));
    }
  }
  CHECK(serving["output_tokens_per_s"]["alone"].get<double>() ==
        Approx(own["throughput"]["output_tokens_per_s"].get<double>()).epsilon(1e-9));
  CHECK(training["step_s"]["alone"].get<double>() == Approx(own_step).epsilon(1e-9));
  // Together, its tensor-parallel all-reduces share the leaf uplinks with the training job's
  // gradients and parameters: every token comes later, and the training steps take longer.
  CHECK(serving["tpot_s"]["together"]["p50"].get<double>() > 1.1 * serving["tpot_s"]["alone"]["p50"].get<double>());
  CHECK(serving["ttft_s"]["together"]["p99"].get<double>() > serving["ttft_s"]["alone"]["p99"].get<double>());
  CHECK(serving["slowdown"].get<double>() ==
        Approx(serving["e2e_s"]["together"]["mean"].get<double>() / serving["e2e_s"]["alone"]["mean"].get<double>()).epsilon(1e-12));
  CHECK(serving["slowdown"].get<double>() > 1.1);
  CHECK(training["slowdown"].get<double>() > 1.05);
  // The training job steps for as long as the serving job serves: a run of 200 requests at 8 a
  // second lasts some 25 s, a dozen steps of about two seconds.
  CHECK(training["steps_together"].get<int>() >= 10);
  std::set<std::string> shared;
  for (const auto& link : crossing["shared_links"]) {
    shared.insert(link["link"].get<std::string>());
    CHECK(link["jobs"] == nlohmann::json::array({"serving", "training"}));
  }
  CHECK(shared == std::set<std::string>{"leaf0.uplink", "leaf1.uplink", "node1.uplink", "node2.uplink"});

  // The same two jobs on nodes 0 and 1, one leaf: what they share (the nodes' uplinks to their
  // leaf) is not oversubscribed, and neither slows down.
  const auto one_leaf = run_on_nodes_0_and_1(beside, {kJob, serving_file});
  CHECK(one_leaf["jobs"]["serving"]["slowdown"].get<double>() == Approx(1.0).epsilon(1e-9));
  CHECK(one_leaf["jobs"]["serving"]["tpot_s"]["together"]["p99"].get<double>() ==
        Approx(one_leaf["jobs"]["serving"]["tpot_s"]["alone"]["p99"].get<double>()).epsilon(1e-9));
  CHECK(one_leaf["jobs"]["training"]["slowdown"].get<double>() == Approx(1.0).epsilon(1e-9));
  for (const auto& link : one_leaf["shared_links"]) CHECK(link["link"].get<std::string>().rfind("leaf", 0) != 0);

  // The training steps beside a serving job are estimated once the serving job's run alone shows
  // how long it serves, and refused past the time limit before they run.
  const auto slow = run_memtwin({"run", source_path(beside), "--set", "simulation.time_limit=100ms"});
  CHECK(slow.exit_code == 2);
  CHECK_THAT(slow.err, Catch::Contains("the training jobs' steps while the serving jobs run") &&
                           Catch::Contains("steps of llama3-8b-fsdp-2x4xh100"));
}

TEST_CASE("a jobs run's link_utilization.csv holds the together phase, interval by interval, summing to the shared links' bytes",
          "[unit]") {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-jobs-links-test";
  std::filesystem::remove_all(dir);
  const auto r = run_memtwin({"run", source_path(kShared), "--out", dir.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream result_file(dir / "result.json");
  const auto result = nlohmann::json::parse(result_file);
  std::map<std::string, double> bytes;  // "link direction" -> summed over the intervals
  double last_time = 0;
  for (const auto& row : memtwin::test::read_link_utilization((dir / "link_utilization.csv").string())) {
    bytes[row.link + " " + row.direction] += row.bytes;
    last_time = std::max(last_time, row.time_s);
    CHECK(row.utilization <= 1.0 + 1e-9);
  }
  // The together phase only: it lasts one step of the slower job (the phases before it are not in
  // the series), and each shared link's intervals add up to what it carried together.
  const double together_step = result["jobs"]["first"]["step_s"]["together"].get<double>();
  CHECK(last_time == Approx(together_step).epsilon(1e-6));
  REQUIRE(!result["shared_links"].empty());
  for (const auto& link : result["shared_links"]) {
    const std::string key = link["link"].get<std::string>() + " " + link["direction"].get<std::string>();
    INFO(key);
    CHECK(bytes[key] == Approx(link["bytes"].get<double>()).epsilon(1e-6));
  }
}

TEST_CASE("a disaggregated serving job beside a training job: its KV transfers share the oversubscribed uplinks, so time "
          "to first token grows and the time between tokens does not", "[unit]") {
  // The example with a shorter request stream (300 requests instead of 1,500), for the test's time.
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-disaggregated-job-test";
  std::filesystem::create_directories(dir);
  copy_replacing("scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml", dir / "disagg.yaml", {{"requests: 1500", "requests: 300"}});
  copy_replacing(kJob, dir / "job.yaml", {});
  copy_replacing("scenarios/jobs/disaggregated-serving-beside-training.yaml", dir / "jobs.yaml",
                 {{"../serving/llama3-8b-disagg-2p2d-h100.yaml", "disagg.yaml"}, {"llama3-8b-fsdp-2x4xh100.yaml", "job.yaml"}});
  const auto own = run_file_json(dir / "disagg.yaml");
  const auto together = run_file_json(dir / "jobs.yaml");
  const auto& serving = together["jobs"]["serving"];
  CHECK(serving["workload"] == "inference");
  // Alone on its GPUs of the shared cluster it serves as on its own four GPUs: its prefill
  // instances' transfers cross node 0's uplink and node 1's, which it has to itself.
  CHECK(serving["plan_hash"] == own["simulated"]["plan_hash"]);
  CHECK(serving["ttft_s"]["alone"]["mean"].get<double>() == Approx(own["latency_s"]["ttft"]["mean"].get<double>()).epsilon(1e-9));
  CHECK(serving["tpot_s"]["alone"]["p50"].get<double>() == Approx(own["latency_s"]["tpot"]["p50"].get<double>()).epsilon(1e-9));
  // Together, the transfers queue behind the training job's traffic on those uplinks: the first
  // token comes later; decoding stays on node 1's GPUs, and the time between tokens hardly moves.
  CHECK(serving["ttft_s"]["together"]["p99"].get<double>() > 1.2 * serving["ttft_s"]["alone"]["p99"].get<double>());
  CHECK(serving["ttft_s"]["together"]["mean"].get<double>() > 1.1 * serving["ttft_s"]["alone"]["mean"].get<double>());
  CHECK(serving["tpot_s"]["together"]["p50"].get<double>() ==
        Approx(serving["tpot_s"]["alone"]["p50"].get<double>()).epsilon(0.05));
  CHECK(together["jobs"]["training"]["slowdown"].get<double>() > 1.0);
  std::set<std::string> shared;
  for (const auto& link : together["shared_links"]) shared.insert(link["link"].get<std::string>() + " " + link["direction"].get<std::string>());
  CHECK(shared == std::set<std::string>{"node0.uplink up", "node1.uplink down"});
  // A disaggregated job's sides must run on the shared cluster's GPU type.
  copy_replacing("scenarios/serving/llama3-8b-disagg-h100-a100.yaml", dir / "mixed.yaml", {});
  std::ofstream(dir / "mixed-jobs.yaml") << "name: mixed\ncluster: {nodes: 4, gpus_per_node: 8, gpu: h100-sxm}\n"
                                            "jobs:\n  - {name: serving, scenario: mixed.yaml}\n";
  const auto mixed = run_memtwin({"check", (dir / "mixed-jobs.yaml").string()});
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, Catch::Contains("jobs[0].scenario: the job's decode instances run on a100-80gb GPUs; the shared "
                                        "cluster's are h100-sxm"));
}

TEST_CASE("a serving job that ends before a training step does: the training job's one step together is its result", "[unit]") {
  const auto result = run_file_json(jobs_file("jobs:\n  - {name: train, scenario: job.yaml}\n"
                                              "  - {name: serve, scenario: short-serving.yaml, first_gpu: 4}\n"));
  const auto& train = result["jobs"]["train"];
  CHECK(train["steps_together"] == 1);
  CHECK(train["step_s"]["together"].get<double>() == Approx(train["step_s"]["alone"].get<double>()).epsilon(1e-9));
  CHECK(train["slowdown"].get<double>() == Approx(1.0).epsilon(1e-9));
  CHECK(result["jobs"]["serve"]["e2e_s"]["alone"]["mean"].get<double>() < train["step_s"]["alone"].get<double>());
}

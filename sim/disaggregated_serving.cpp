#include "sim/disaggregated_serving.h"

#include <algorithm>
#include <map>
#include <memory>

#include <simgrid/s4u.hpp>

#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/disaggregation.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "models/serving/router.h"
#include "sim/engine_setup.h"
#include "sim/link_meter.h"
#include "sim/platform.h"
#include "sim/resource_check.h"
#include "sim/serving_replicas.h"

namespace memtwin::sim {
namespace {

// One side's instances: their scenario, memory, iteration model, size model and replica actors.
struct Side {
  Side(const Scenario& deployment, InstanceRole role, ServingRun& out, const Platform& platform)
      : scenario(instance_scenario(deployment, role)),
        memory(serving_memory(scenario)),
        model(scenario),
        kv(make_kv_compressor(scenario.inference->kv_cache.compression, serving_kv_shape(scenario))),
        router(scenario.inference->serving.router, static_cast<std::size_t>(scenario.inference->serving.replicas)) {
    const ServingSpec& sv = scenario.inference->serving;
    const int first = first_gpu_of(*deployment.inference->disaggregation, deployment.cluster, role);
    for (int r = 0; r < sv.replicas; ++r) {
      Placement p;
      for (int g = 0; g < sv.tensor_parallel; ++g) p.gpus.push_back(first + r * sv.tensor_parallel + g);
      p.stages.push_back(p.gpus);
      p.node = platform.node_of_gpu[p.gpus.front()];
      instances.push_back(make_replica(r, scenario, model, *kv, out, std::max<std::int64_t>(1, memory.capacity_blocks),
                                       memory.block_bytes.as_double(), platform, p));
      gpus.push_back(p.gpus);
    }
  }
  std::size_t pick() {
    return router.pick([&](std::size_t i) { return instances[i]->outstanding(0); },
                       [&](std::size_t i) { return instances[i]->used_blocks(0); });
  }
  Scenario scenario;
  ServingMemory memory;
  IterationModel model;
  std::unique_ptr<KvCompressor> kv;
  ReplicaRouter router;
  std::vector<std::unique_ptr<ReplicaGroup>> instances;
  std::vector<std::vector<int>> gpus;  // each instance's, in tensor-rank order
};

}  // namespace

// The deployment's records, both sides and the router's and transfers' bookkeeping, which the
// actors share.
struct DisaggregatedSession::State {
  State(const Scenario& deployment, const std::vector<Request>& requests, const Platform& on, Progress* reporter)
      : s(deployment), inf(*deployment.inference), platform(on), progress(reporter),
        result{start_serving_run(requests), start_serving_run(requests), {}},
        out(result.run),
        prefill(deployment, InstanceRole::prefill, result.prefill_run, on),
        decode(deployment, InstanceRole::decode, result.run, on),
        closed_loop(inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty()),
        layerwise(inf.disaggregation->layerwise_transfer),
        layers(deployment.model.layers) {
    out.capacity_blocks = decode.memory.capacity_blocks;
    result.prefill_run.capacity_blocks = prefill.memory.capacity_blocks;
    for (std::size_t i = 0; i < prefill.instances.size(); ++i) {
      if (layerwise) prefill.instances[i]->on_prefill_start([this, i](std::size_t record) { start_streaming(record, i); });
      prefill.instances[i]->on_finish([this, i](std::size_t record) {
        if (result.prefill_run.requests[record].finish_s == -2) {  // a prompt no prefill instance can hold
          out.requests[record].finish_s = -2;
          ++out.rejected;
          finish_one();
          return;
        }
        hand_over(record, i);
      });
    }
    for (auto& d : decode.instances) d->on_finish([this](std::size_t) { finish_one(); });
  }

  void close_all() {
    for (auto* side : {&prefill, &decode})
      for (auto& i : side->instances) i->close();
  }
  void route(std::size_t record) {
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    prefill.instances[prefill.pick()]->enqueue(0, record, out.requests[record].prompt_tokens);
  }
  void finish_one() {
    ++finished;
    const std::size_t total = out.requests.size();
    if (progress) progress->report(finished, total, "requests");
    if (closed_loop && next < total) route(next++);
    if (finished >= total) close_all();
  }
  // A request's KV cache crosses from its prefill instance to a decode instance. Each prefill GPU
  // holds its tensor rank's KV heads; with the same tensor parallelism on both sides each sends its
  // share to the same rank there, otherwise every pair of ranks exchanges its overlap. `per_gpu`
  // is what one prefill GPU sends; the flows run until all have arrived.
  void send_kv(const std::vector<int>& src, const std::vector<int>& dst, double per_gpu) const {
    std::vector<sg4::CommPtr> flows;
    if (src.size() == dst.size()) {
      for (std::size_t g = 0; g < src.size(); ++g) {
        flows.push_back(sg4::Comm::sendto_async(platform.gpus[src[g]], platform.gpus[dst[g]], static_cast<std::uint64_t>(per_gpu)));
      }
    } else {
      const auto share = static_cast<std::uint64_t>(per_gpu / static_cast<double>(dst.size()));
      for (int a : src)
        for (int b : dst) flows.push_back(sg4::Comm::sendto_async(platform.gpus[a], platform.gpus[b], share));
    }
    for (auto& f : flows) f->wait();
  }
  // Layer-wise transfer: when a prompt's prefill starts, the router picks its decode instance and
  // the KV of all layers but the last streams there while the prefill runs (a layer's KV cannot
  // leave before its layer is computed; the last one leaves at the prefill's end).
  void start_streaming(std::size_t record, std::size_t from) {
    if (streamed.count(record)) return;  // restarted by a recompute: its stream is under way
    Streamed& st = streamed[record];
    st.to = decode.pick();
    st.arrived = sg4::Semaphore::create(0);
    const double per_gpu = prefill.kv->sequence_bytes(out.requests[record].prompt_tokens, 0) * (layers - 1) / layers;
    const std::vector<int>& src = prefill.gpus[from];
    sg4::Actor::create("kv_stream" + std::to_string(record), platform.gpus[src.front()],
                       [this, src, dst = decode.gpus[st.to], per_gpu, arrived = st.arrived] {
                         send_kv(src, dst, per_gpu);
                         arrived->release();
                       });
  }
  // A prompt prefilled: its KV cache (the rest of it, when streamed) goes to its decode instance.
  void hand_over(std::size_t record, std::size_t from) {
    const auto stream = streamed.find(record);
    const std::size_t to = stream != streamed.end() ? stream->second.to : decode.pick();
    const sg4::SemaphorePtr streamed_part = stream != streamed.end() ? stream->second.arrived : nullptr;
    if (stream != streamed.end()) streamed.erase(stream);  // its prefill is over: no restart can come
    RequestRecord& r = out.requests[record];
    r.prefilled_s = sg4::Engine::get_clock();
    const double per_gpu = prefill.kv->sequence_bytes(r.prompt_tokens, 0);
    const std::vector<int>& src = prefill.gpus[from];
    const std::vector<int>& dst = decode.gpus[to];
    r.kv_transfer_bytes = per_gpu * static_cast<double>(src.size());
    r.replica = static_cast<int>(to);
    ReplicaGroup* target = decode.instances[to].get();
    const double after_prefill = streamed_part ? per_gpu / layers : per_gpu;
    sg4::Actor::create("kv_transfer" + std::to_string(record), platform.gpus[src.front()],
                       [this, record, src, dst, after_prefill, streamed_part, target] {
      const double began = sg4::Engine::get_clock();
      send_kv(src, dst, after_prefill);
      if (streamed_part) streamed_part->acquire();
      RequestRecord& q = out.requests[record];
      q.kv_transfer_s = sg4::Engine::get_clock() - began;  // what the decode waits for after the prefill
      q.first_token_s = sg4::Engine::get_clock();  // the first token reaches the client with its KV
      if (q.output_tokens <= 1) {
        q.finish_s = q.first_token_s;
        finish_one();
      } else {
        target->enqueue(0, record, q.prompt_tokens);
      }
    });
  }

  const Scenario& s;
  const Inference& inf;
  const Platform& platform;
  Progress* progress;
  DisaggregatedRun result;
  ServingRun& out;  // result.run
  Side prefill, decode;
  const bool closed_loop, layerwise;
  const double layers;
  std::size_t next = 0, finished = 0;
  struct Streamed {
    std::size_t to = 0;
    sg4::SemaphorePtr arrived;  // released when the streamed layers have arrived
  };
  std::map<std::size_t, Streamed> streamed;
  double began_s = 0, router_ended_s = 0;
};

DisaggregatedSession::DisaggregatedSession(const Scenario& deployment, const std::vector<Request>& requests,
                                           const Platform& platform, Progress* progress)
    : state_(std::make_unique<State>(deployment, requests, platform, progress)) {}

DisaggregatedSession::~DisaggregatedSession() = default;

std::vector<sg4::ActorPtr> DisaggregatedSession::start() {
  State& st = *state_;
  st.began_s = sg4::Engine::get_clock();
  std::vector<sg4::ActorPtr> actors{start_router(st.platform, st.inf, st.out, st.next, [&st](std::size_t r) { st.route(r); },
                                                 [&st] { st.close_all(); }, st.router_ended_s)};
  int first = 0;
  for (Side* side : {&st.prefill, &st.decode})
    for (auto& i : side->instances)
      for (auto& a : i->start(st.platform, first++)) actors.push_back(std::move(a));
  return actors;
}

DisaggregatedRun DisaggregatedSession::finish() {
  State& st = *state_;
  std::vector<const ReplicaGroup*> engines;
  for (const Side* side : {&st.prefill, &st.decode})
    for (const auto& i : side->instances) engines.push_back(i.get());
  end_serving_run(st.out, st.began_s, st.router_ended_s, engines, st.closed_loop);
  st.result.prefill_run.count_times_from(st.began_s);  // its own records' times, on the same clock
  return std::move(st.result);
}

DisaggregatedRun simulate_disaggregated_serving(const Scenario& s, Progress* progress) {
  const std::vector<Request> requests = generate_requests(*s.inference, s.seed);
  refuse_beyond_machine(s, estimate_serving(s, requests));
  auto engine = make_engine();
  LinkMeter::enable();
  const Platform platform = build_platform(s.cluster, node_clusters(s));
  const LinkCounters counters(platform.links);
  LinkMeter meter(counters, platform.cpus.front());
  DisaggregatedSession session(s, requests, platform, progress);
  session.start();
  engine->run();
  DisaggregatedRun result = session.finish();
  result.link_load = meter.finish();
  return result;
}

}  // namespace memtwin::sim

#pragma once
// Which replica an arriving request goes to (inference.serving.router), decided in one place for
// the simulator's router actor and the hardware engine's expert-parallel ranks, which route every
// arrival the same way from the same counts so that each rank knows where every request went.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "models/enums.h"

namespace memtwin {

class ReplicaRouter {
 public:
  ReplicaRouter(Router policy, std::size_t replicas) : policy_(policy), replicas_(replicas) {}
  /// The replica for the next request, given each replica's outstanding requests and KV blocks in
  /// use now: round robin, or the first with the fewest.
  std::size_t pick(const std::function<std::size_t(std::size_t)>& outstanding,
                   const std::function<std::int64_t(std::size_t)>& used_blocks) {
    std::size_t best = 0;
    switch (policy_) {
      case Router::round_robin: best = next_++ % replicas_; break;
      case Router::least_outstanding:
        for (std::size_t i = 1; i < replicas_; ++i)
          if (outstanding(i) < outstanding(best)) best = i;
        break;
      case Router::least_kv:
        for (std::size_t i = 1; i < replicas_; ++i)
          if (used_blocks(i) < used_blocks(best)) best = i;
        break;
    }
    return best;
  }

 private:
  Router policy_;
  std::size_t replicas_;
  std::size_t next_ = 0;
};

}  // namespace memtwin

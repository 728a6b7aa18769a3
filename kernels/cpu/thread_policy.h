#pragma once
// Internal to kernels/cpu: whether a decode attention call runs on OpenMP's team of threads or on
// the calling thread alone.
//
// A team pays only while its threads have cores. Where other work holds a core, OpenMP's barrier at
// the end of a call waits for whichever thread lost its core for a scheduler slice: on the 2-core
// development VM with one busy core, two threads took a median 1.1-1.2 ms per 8K-token call but one
// call in ten took 5-8 ms, where one thread took 2.1-2.2 ms. So every call that could use the team
// is timed, each mode's cost (seconds per unit of work, the caller's measure) is kept as a moving
// average of its recent calls, and the cheaper mode is used; the other is tried again once `kRetry`
// has passed, so that the choice follows the machine's load as it comes and goes. The mode only
// changes which thread computes which KV heads: every output is computed the same way
// (bit-identical).
#include <chrono>
#include <mutex>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace memtwin::kernels {

class ThreadPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  /// How long the mode not chosen waits before it is measured again.
  static constexpr Clock::duration kRetry = std::chrono::milliseconds(250);
  /// Team calls measured before the calling thread alone is first measured (the very first team
  /// call, which starts OpenMP's threads, is not measured).
  static constexpr int kTeamCallsFirst = 3;

  struct Choice {
    bool team = false;
    bool probe = false;  ///< the mode not currently the cheaper, measured again
  };
  /// How a call that could use the team (work worth threads, a team of two or more) should run.
  Choice choose(Clock::time_point now) {
    const std::lock_guard lock(mutex_);
    if (team_calls_ <= kTeamCallsFirst) return {true, false};  // the team first: the faster where cores are free
    if (cost_[kAlone] == 0) {                                  // then one measurement alone
      retry_at_ = now + kRetry;
      return {false, true};
    }
    const bool team_cheaper = cost_[kTeam] <= cost_[kAlone];
    if (now >= retry_at_) {  // the other mode once, to see whether the load has changed
      retry_at_ = now + kRetry;
      return {!team_cheaper, true};
    }
    return {team_cheaper, false};
  }

  /// A call's measured time, `work` its size in the caller's unit (the decode kernels: multiply-adds).
  void record(Choice choice, double work, double seconds) {
    if (!(work > 0) || !(seconds >= 0)) return;
    const std::lock_guard lock(mutex_);
    if (choice.team && team_calls_++ == 0) return;  // the call that started the threads
    double& cost = cost_[choice.team ? kTeam : kAlone];
    const double measured = seconds / work;
    // The mode in use moves a quarter of the way to each call's cost: a team that stalls one call
    // in several soon costs more than one thread alone, while a call a little slower than usual
    // does not flip the choice (one stalled for a whole slice does, until the next probe). A probe
    // of the other mode moves it half way, so that a load that has gone (or come) shows within a
    // few probes.
    const double weight = choice.probe ? 0.5 : 0.25;
    cost = cost == 0 ? measured : (1 - weight) * cost + weight * measured;
  }

  /// Seconds per unit of work, alone or on the team; 0 until measured.
  [[nodiscard]] double cost(bool team) {
    const std::lock_guard lock(mutex_);
    return cost_[team ? kTeam : kAlone];
  }

 private:
  static constexpr int kAlone = 0, kTeam = 1;
  std::mutex mutex_;
  double cost_[2] = {0, 0};
  int team_calls_ = 0;
  Clock::time_point retry_at_{};
};

/// One call's choice: `team()` says whether it runs on the team. Where the call could use a team
/// (its work worth threads, two or more of them), the policy chooses and the call is timed from
/// here to the end of this object's scope, for the policy.
class ThreadChoice {
 public:
  ThreadChoice(ThreadPolicy& policy, bool worth_threads, double work) : policy_(policy), work_(work) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    chosen_ = worth_threads && threads > 1;
    if (chosen_) {
      start_ = ThreadPolicy::Clock::now();
      choice_ = policy_.choose(start_);
    }
  }
  ThreadChoice(const ThreadChoice&) = delete;
  ThreadChoice& operator=(const ThreadChoice&) = delete;
  ~ThreadChoice() {
    if (chosen_) policy_.record(choice_, work_, std::chrono::duration<double>(ThreadPolicy::Clock::now() - start_).count());
  }
  [[nodiscard]] bool team() const { return choice_.team; }

 private:
  ThreadPolicy& policy_;
  double work_;
  bool chosen_ = false;
  ThreadPolicy::Choice choice_;
  ThreadPolicy::Clock::time_point start_{};
};

}  // namespace memtwin::kernels

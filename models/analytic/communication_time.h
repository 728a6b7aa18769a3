#pragma once
// The analytic backend's communication time: every collective of the training plan priced by the
// collective model alone on idle links and summed per kind, for the busiest rank. No overlap with
// compute and no contention: the simulator adds those.
#include <map>
#include <string>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

struct CommunicationTime {
  int rank = 0;                             ///< the rank whose program communicates longest
  std::map<std::string, double> seconds;    ///< by collective_name, plus "total"
  std::map<std::string, int> calls;         ///< collectives issued by that rank, by kind
  std::map<std::string, std::string> basis; ///< how the largest call of each kind was priced
};

CommunicationTime communication_time(const Scenario& scenario, const Plan& plan);

}  // namespace memtwin

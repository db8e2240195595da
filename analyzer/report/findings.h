// The bottleneck rule engine: each class of bottleneck is a rule that reads
// the analyses of a report and produces a Finding with its evidence, what to
// change and the time it would save. Rules that need data a later recorder
// brings (device activity, call stacks) say so instead of guessing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/common/status.h"

namespace pinscope {

class Report;

struct Finding {
  enum class Kind {
    kTime,     // costs the job time now; saving_ns is the estimate
    kRisk,     // may fail the job (e.g. /dev/shm close to full)
    kFailure,  // made the job fail (e.g. SIGBUS in shm)
  };
  std::string id;  // stable: "pageable_staging", "shm_capacity", "shm_sigbus"
  Kind kind = Kind::kTime;
  Severity severity = Severity::kWarning;
  std::string title;       // "pageable staging"
  std::string verdict;     // one sentence with the number behind it
  std::string evidence;    // what the trace shows
  std::string action;      // what to change
  uint64_t saving_ns = 0;  // kTime: estimated time saved
  double fraction = 0;     // saving as a share of the affected thread's time
  // Worth acting on: big enough to lead the verdict and the advice.
  bool significant = false;
};

// A class of bottleneck the report cannot assess yet, and why.
struct PendingCheck {
  std::string id;
  std::string title;
  std::string needs;
};

// A saving is significant from this share of the affected thread's time.
inline constexpr double kSignificantFraction = 0.02;

class BottleneckRule {
 public:
  virtual ~BottleneckRule() = default;
  virtual const char* id() const = 0;
  virtual const char* title() const = 0;
  // Non-empty: the data this rule still needs; it is listed, not evaluated.
  virtual std::string MissingData(const Report& report) const { return ""; }
  virtual void Evaluate(const Report& report, std::vector<Finding>* findings) const {}
};

// The rules in the order they are evaluated.
std::vector<std::unique_ptr<BottleneckRule>> DefaultRules();

}  // namespace pinscope

// Named, documented, composable faults for the built-in cached engine. Each reproduces
// one row of the failure matrix on purpose. Syntax: NAME[:key=value[,key=value...]], e.g.
//   wrong_layer:layer=2,source=1     cross_request:request=1,victim=0
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvscope {

struct FaultParameter {
  std::string name;
  std::string meaning;
  std::string defaultValue;  // as text
};

struct FaultInfo {
  std::string name;
  std::string description;
  std::string matrixRow;     // the failure-matrix observation it produces
  std::vector<FaultParameter> parameters;
};

/// Whether an injected fault changed anything in the run, and where it first did, or why
/// it never could (the engine records it; traces from before the record have none).
struct FaultFiring {
  bool fired = false;
  int64_t request = -1;  // where it first fired (-1: not one request / layer)
  int64_t step = -1;
  int64_t layer = -1;
  std::string reason;    // fired == false: why it never fired
  /// "fired at request 0, step 2, layer 1" or "never fired: <reason>".
  std::string describe() const;
  bool operator==(const FaultFiring& o) const {
    return fired == o.fired && request == o.request && step == o.step && layer == o.layer &&
           reason == o.reason;
  }
};

struct FaultSpec {
  std::string name;
  std::map<std::string, int64_t> params;  // every parameter present (defaults filled in)

  /// Parses "NAME[:k=v,...]". Throws UsageError naming the fault or parameter and listing
  /// what is accepted.
  static FaultSpec parse(const std::string& text);
  static const std::vector<FaultInfo>& catalog();
  /// Help text for --help: every fault, its parameters and defaults.
  static std::string helpText();

  int64_t get(const std::string& key) const;  // throws std::out_of_range for unknown keys
  std::string toString() const;               // canonical NAME:k=v,... form
  bool operator==(const FaultSpec& o) const { return name == o.name && params == o.params; }
};

}  // namespace kvscope

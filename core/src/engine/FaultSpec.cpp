#include "kvscope/FaultSpec.hpp"

#include <sstream>

#include "audit/rows/RowRegistry.hpp"
#include "kvscope/Error.hpp"

namespace kvscope {

// Each fault is described by the failure-matrix row it reproduces (core/src/audit/rows/), in
// the matrix's order; the engine's injection of it is in FaultPlan.
const std::vector<FaultInfo>& FaultSpec::catalog() {
  static const std::vector<FaultInfo> faults = [] {
    std::vector<FaultInfo> out;
    for (const detail::FailureRow* row : detail::RowRegistry::listed())
      out.insert(out.end(), row->spec().faults.begin(), row->spec().faults.end());
    return out;
  }();
  return faults;
}

std::string FaultSpec::helpText() {
  std::ostringstream os;
  os << "Fault SPEC syntax: NAME[:key=value[,key=value...]] (repeat --fault to combine)\n";
  for (const auto& f : catalog()) {
    os << "  " << f.name << ": " << f.description << "\n";
    for (const auto& p : f.parameters)
      os << "      " << p.name << "=" << p.defaultValue << "  " << p.meaning << "\n";
  }
  return os.str();
}

FaultSpec FaultSpec::parse(const std::string& text) {
  FaultSpec spec;
  const auto colon = text.find(':');
  spec.name = text.substr(0, colon);
  const FaultInfo* info = nullptr;
  for (const auto& f : catalog())
    if (f.name == spec.name) info = &f;
  if (!info) {
    std::string names;
    for (const auto& f : catalog()) names += (names.empty() ? "" : ", ") + f.name;
    throw UsageError("unknown fault '" + spec.name + "' in --fault '" + text + "' (known: " + names + ")");
  }
  for (const auto& p : info->parameters) spec.params[p.name] = std::stoll(p.defaultValue);
  if (colon == std::string::npos) return spec;
  std::stringstream rest(text.substr(colon + 1));
  std::string item;
  while (std::getline(rest, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || !spec.params.count(key)) {
      std::string keys;
      for (const auto& p : info->parameters) keys += (keys.empty() ? "" : ", ") + p.name;
      throw UsageError("fault '" + spec.name + "': bad parameter '" + item + "' (expected key=value with key one of: " + keys + ")");
    }
    const std::string value = item.substr(eq + 1);
    try {
      size_t used = 0;
      spec.params[key] = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      throw UsageError("fault '" + spec.name + "': parameter '" + key + "' needs an integer, got '" + value + "'");
    }
  }
  return spec;
}

std::string FaultFiring::describe() const {
  if (!fired) return "never fired: " + reason;
  std::string where;
  auto add = [&](const char* what, int64_t v) {
    if (v >= 0) where += (where.empty() ? " at " : ", ") + std::string(what) + " " + std::to_string(v);
  };
  add("request", request);
  add("step", step);
  add("layer", layer);
  return "fired" + where;
}

int64_t FaultSpec::get(const std::string& key) const { return params.at(key); }

std::string FaultSpec::toString() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    out += sep + k + "=" + std::to_string(v);
    sep = ',';
  }
  return out;
}

}  // namespace kvscope

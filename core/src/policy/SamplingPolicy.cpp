#include "kvscope/SamplingPolicy.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"

namespace kvscope {

namespace {

// Shortest decimal form that reads back as the same double ("0.7", not "0.69999999").
std::string shortest(double v) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

const char* tieRuleName(SamplingPolicy::TieRule r) {
  return r == SamplingPolicy::TieRule::Highest ? "highest" : "lowest";
}

}  // namespace

void SamplingPolicy::validate() const {
  if (std::isnan(temperature))
    throw UsageError("temperature is NaN; use a finite value >= 0 (0 = greedy)");
  if (std::isinf(temperature))
    throw UsageError("temperature " + shortest(temperature) +
                     " is infinite; use a finite value >= 0 (0 = greedy)");
  if (temperature < 0.0)
    throw UsageError("temperature " + shortest(temperature) +
                     " is negative; use a finite value >= 0 (0 = greedy)");
  if (topK && *topK < 1)
    throw UsageError("top-k " + std::to_string(*topK) +
                     " is below 1; use an integer >= 1 or leave top-k unset");
  if (topP) {
    if (std::isnan(*topP)) throw UsageError("top-p is NaN; use a value in (0, 1]");
    if (!(*topP > 0.0) || *topP > 1.0)
      throw UsageError("top-p " + shortest(*topP) +
                       " is outside (0, 1]; use a value in (0, 1] or leave top-p unset"
                       " (top-p 0 is refused: transformers would silently keep one token)");
  }
}

std::string SamplingPolicy::describe() const {
  if (greedy()) {
    return tieRule == TieRule::Lowest ? std::string("greedy")
                                      : std::string("greedy (ties to the highest id)");
  }
  std::string out = "T=" + shortest(temperature);
  if (topK) out += " top-k=" + std::to_string(*topK);
  if (topP) out += " top-p=" + shortest(*topP);
  out += " seed=" + std::to_string(seed);
  return out;
}

bool SamplingPolicy::operator==(const SamplingPolicy& o) const {
  return temperature == o.temperature && topK == o.topK && topP == o.topP && seed == o.seed &&
         tieRule == o.tieRule && generator == o.generator;
}

SamplingPolicy SamplingOptions::policy() const {
  SamplingPolicy p;
  p.temperature = temperature.value_or(defaultTemperature);
  p.topK = topK;
  p.topP = topP;
  p.seed = seed.value_or(0);
  if (tieRule) {
    if (*tieRule == "highest")
      p.tieRule = SamplingPolicy::TieRule::Highest;
    else if (*tieRule != "lowest")
      throw UsageError("tie rule '" + *tieRule + "': expected lowest or highest");
  }
  p.validate();
  return p;
}

bool SamplingPolicy::replayableBy(const std::string& traceEngine) const {
  if (!generator.empty()) return generator == kKvScopeGenerator;
  return traceEngine.rfind("kvscope", 0) == 0;
}

void to_json(nlohmann::json& j, const SamplingPolicy& p) {
  j = nlohmann::json::object();
  j["temperature"] = p.temperature;
  j["top_k"] = p.topK ? nlohmann::json(*p.topK) : nlohmann::json(nullptr);
  j["top_p"] = p.topP ? nlohmann::json(*p.topP) : nlohmann::json(nullptr);
  j["seed"] = p.seed;
  j["tie_rule"] = tieRuleName(p.tieRule);
  if (!p.generator.empty()) j["generator"] = p.generator;
}

// Errors name the offending key; the caller that knows the file rethrows with its path.
void from_json(const nlohmann::json& j, SamplingPolicy& p) {
  if (!j.is_object()) throw InputError("", "policy", "expected a JSON object");
  SamplingPolicy out;
  auto it = j.find("temperature");
  if (it == j.end() || !it->is_number())
    throw InputError("", "temperature", "expected a number (0 = greedy)");
  out.temperature = it->get<double>();

  if ((it = j.find("top_k")) != j.end() && !it->is_null()) {
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() &&
         it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      throw InputError("", "top_k", "expected an integer (at most 2^63 - 1) or null");
    out.topK = it->get<int64_t>();
  }
  if ((it = j.find("top_p")) != j.end() && !it->is_null()) {
    if (!it->is_number()) throw InputError("", "top_p", "expected a number or null");
    out.topP = it->get<double>();
  }
  if ((it = j.find("seed")) != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned())
      throw InputError("", "seed", "expected a non-negative integer");
    out.seed = it->get<uint64_t>();
  }
  if ((it = j.find("tie_rule")) != j.end() && !it->is_null()) {
    const std::string rule = it->is_string() ? it->get<std::string>() : std::string();
    if (rule == "lowest")
      out.tieRule = SamplingPolicy::TieRule::Lowest;
    else if (rule == "highest")
      out.tieRule = SamplingPolicy::TieRule::Highest;
    else
      throw InputError("", "tie_rule", "expected \"lowest\" or \"highest\"");
  }
  if ((it = j.find("generator")) != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty())
      throw InputError("", "generator",
                       "expected a generator name such as \"kvscope\" or \"torch\"");
    out.generator = it->get<std::string>();
  }
  try {
    out.validate();
  } catch (const UsageError& e) {
    throw InputError("", "policy", e.what());
  }
  p = out;
}

}  // namespace kvscope

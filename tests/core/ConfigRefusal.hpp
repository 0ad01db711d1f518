// What ModelConfig::fromJson says when it refuses a config.json: the family tests' check that a
// refusal names the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::test {

/// The InputError's text for `doc` read as dir/config.json; "" when it loads.
inline std::string configRefusal(const nlohmann::json& doc) {
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace kvscope::test

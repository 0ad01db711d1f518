// A suite's scratch folder under the test process's temporary root (test::freshDir).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "TestSupport.hpp"

namespace kvscope::test {

/// freshDir(name), created; emptied once per test process, then the same folder.
inline std::filesystem::path scratchDir(const std::string& name) {
  static std::map<std::string, std::filesystem::path> made;
  auto it = made.find(name);
  if (it == made.end()) {
    it = made.emplace(name, freshDir(name)).first;
    std::filesystem::create_directories(it->second);
  }
  return it->second;
}

}  // namespace kvscope::test

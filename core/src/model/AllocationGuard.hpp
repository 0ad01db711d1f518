// Turns allocation failures inside LibTorch (c10::Error "can't allocate memory",
// std::bad_alloc) into OutOfMemoryError with a sentence instead of a stack dump.
#pragma once

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "kvscope/MemoryBudget.hpp"

namespace kvscope::detail {

inline std::string outOfMemoryMessage(const std::string& what) {
  const auto a = MemoryAvailable::now();
  return what + " ran out of memory (" + gigabytes(a.ram) + " available, " + a.ramSource +
         "); use a shorter run, audit in trace+trace mode (kvscope-cli audit --reference-trace "
         "A --trace B loads no model), or a machine with more memory";
}

template <typename F>
auto guardAllocations(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    if (m.find("alloc") != std::string::npos || m.find("memory") != std::string::npos)
      throw OutOfMemoryError(outOfMemoryMessage(what));
    throw;
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(outOfMemoryMessage(what));
  }
}

}  // namespace kvscope::detail

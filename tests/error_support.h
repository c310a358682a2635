// The message of the pipeplan::Error that a call throws, for tests that assert on it.
#pragma once

#include <functional>
#include <string>

#include "planner/base/error.h"

namespace pipeplan::testing {

// e.what() of the pipeplan::Error `f` throws, or "<no error>" when it returns; any other
// exception propagates and fails the test.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace pipeplan::testing

#pragma once
// The tests' one way to make a scratch directory.

#include <stdlib.h>

#include <stdexcept>
#include <string>

namespace slotted::test {

// Creates a new, private directory /tmp/slotted-<what>-XXXXXX (mkdtemp) and returns its
// path; removing it is the caller's.
inline std::string make_temp_dir(const std::string& what) {
  std::string tmpl = "/tmp/slotted-" + what + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

}  // namespace slotted::test

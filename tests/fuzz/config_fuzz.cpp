// libFuzzer harness: the YAML config loader (config::parse_config) on arbitrary text.
//
// It must return a config or throw config_error with at least one non-empty problem;
// any other exception, a crash or a sanitizer report is a bug. A password and a token
// wait in files and an environment variable the seeds name
// (/tmp/slotted-fuzz-config-password, /tmp/slotted-fuzz-config-token,
// SLOTTED_FUZZ_PASSWORD): a problem message must never carry a resolved secret.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "config/config.hpp"

namespace {
constexpr const char* secret = "s3cr3t-fuzz-password-7f3a";

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "config_fuzz: invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::ofstream("/tmp/slotted-fuzz-config-password") << secret << "\n";
  std::ofstream("/tmp/slotted-fuzz-config-token") << secret << "\n";
  ::setenv("SLOTTED_FUZZ_PASSWORD", secret, 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool names_secret = text.find(secret) != std::string::npos;
  try {
    const auto cfg = slotted::config::parse_config(text, "fuzz.yaml");
    if (cfg.flush.slots == 0) fail("a config with zero slots was accepted");
    if (cfg.shards == 0) fail("a config with zero shards was accepted");
  } catch (const slotted::config::config_error& e) {
    if (e.problems().empty()) fail("config_error without a problem");
    for (const auto& p : e.problems()) {
      if (p.empty()) fail("an empty problem");
      if (!names_secret && p.find(secret) != std::string::npos)
        fail("a problem message carries a secret", p);
    }
  }
  return 0;
}

// e2e_pinning_test, section 11 (hidden_scenarios.cc): memory pinscope
// registered answers every query of the runtime and the driver (and of the
// entry points they hand out) as without pinscope, the program's own
// registrations still answer registered, and pinscope's copy path still
// uses its registration. See pinning_checks.h.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "pinning_checks.h"

namespace e2e_pinning {
namespace {

// The answers Ask() prints for one buffer, without the buffer's prefix.
const std::vector<std::string> kAnswers = {"attr_rc",
                                           "attr_type",
                                           "attr_device",
                                           "attr_host",
                                           "attr_dev",
                                           "last_error",
                                           "inner_attr_rc",
                                           "inner_attr_type",
                                           "inner_attr_device",
                                           "inner_attr_host",
                                           "inner_attr_dev",
                                           "inner_last_error",
                                           "flags_rc",
                                           "flags",
                                           "flags_last_error",
                                           "devptr_rc",
                                           "devptr",
                                           "devptr_last_error",
                                           "cu_type_rc",
                                           "cu_type",
                                           "cu_dev_rc",
                                           "cu_dev",
                                           "cu_attrs_rc",
                                           "cu_attrs_type",
                                           "cu_attrs_host",
                                           "cu_attrs_managed",
                                           "cu_flags_rc",
                                           "cu_flags",
                                           "cu_devptr_rc",
                                           "cu_devptr",
                                           "ep_type_rc",
                                           "ep_type",
                                           "proc_flags_rc",
                                           "proc_flags"};

std::string Key(const std::string& buf, const std::string& answer) {
  // Ask() names the interior address's answers "<buf>_inner_<what>".
  return buf + "_" + answer;
}

const Env kPinSmall = {
    {"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_MIN", "4K"}, {"PINSCOPE_TRACE_MIN", "4K"}};

TEST_F(E2EPinning, RegistrationsAreInvisibleToTheProgramsQueries) {
  TraceFile t = Scenario("hidden", kPinSmall);
  const RunResult pinned = r_;
  ASSERT_EQ(pinned.at("a_registered"), 1u) << "the test needs pinscope to register a";
  ASSERT_EQ(pinned.at("b_registered_before"), 1u);

  // The same program without pinscope: a was never registered there.
  e2e::TempDir plain_dir;
  RunOptions o;
  o.args = {"hidden"};
  o.preload = false;
  RunResult plain = e2e::Run(E2E_PIN_PROG, o, plain_dir.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_text;
  EXPECT_EQ(plain.at("a_registered"), 0u);

  for (const std::string& answer : kAnswers) {
    // a answers as without pinscope, and as the never-copied buffer does.
    EXPECT_EQ(pinned.at(Key("a", answer)), plain.at(Key("a", answer))) << answer;
    EXPECT_EQ(pinned.at(Key("a", answer)), pinned.at(Key("plain", answer))) << answer;
    // The program's own registrations answer as they do without pinscope.
    EXPECT_EQ(pinned.at(Key("own", answer)), plain.at(Key("own", answer))) << answer;
    EXPECT_EQ(pinned.at(Key("b", answer)), plain.at(Key("b", answer))) << answer;
  }
  // What those answers are (the double follows the real runtime and driver).
  EXPECT_EQ(pinned.at("a_attr_type"), unsigned{cudaMemoryTypeUnregistered});
  EXPECT_EQ(pinned.at("a_inner_attr_type"), unsigned{cudaMemoryTypeUnregistered});
  EXPECT_EQ(pinned.at("a_attr_host"), 1u);  // hostPointer is the program's address
  EXPECT_EQ(pinned.at("a_attr_dev"), 0u);
  EXPECT_EQ(pinned.at("a_flags_rc"), unsigned{cudaErrorInvalidValue});
  EXPECT_EQ(pinned.at("a_flags_last_error"), unsigned{cudaErrorInvalidValue});
  EXPECT_EQ(pinned.at("a_devptr_rc"), unsigned{cudaErrorInvalidValue});
  EXPECT_EQ(pinned.at("a_cu_type_rc"), unsigned{CUDA_ERROR_INVALID_VALUE});
  EXPECT_EQ(pinned.at("a_cu_attrs_rc"), 0u);
  EXPECT_EQ(pinned.at("a_cu_attrs_type"), 0u);
  EXPECT_EQ(pinned.at("a_cu_attrs_host"), 0u);
  EXPECT_EQ(pinned.at("a_cu_flags_rc"), unsigned{CUDA_ERROR_INVALID_VALUE});
  EXPECT_EQ(pinned.at("a_cu_devptr_rc"), unsigned{CUDA_ERROR_INVALID_VALUE});
  EXPECT_EQ(pinned.at("a_ep_type_rc"), unsigned{CUDA_ERROR_INVALID_VALUE});
  EXPECT_EQ(pinned.at("a_proc_flags_rc"), unsigned{CUDA_ERROR_INVALID_VALUE});
  EXPECT_EQ(pinned.at("own_attr_type"), unsigned{cudaMemoryTypeHost});
  EXPECT_EQ(pinned.at("own_flags_rc"), 0u);
  EXPECT_EQ(pinned.at("own_flags"), unsigned{cudaHostRegisterPortable});
  EXPECT_EQ(pinned.at("own_cu_type"), unsigned{CU_MEMORYTYPE_HOST});
  EXPECT_EQ(pinned.at("own_ep_type"), unsigned{CU_MEMORYTYPE_HOST});
  EXPECT_EQ(pinned.at("own_proc_flags"), unsigned{cudaHostRegisterPortable});
  EXPECT_EQ(pinned.at("b_register_rc"), 0u);
  EXPECT_EQ(pinned.at("b_attr_type"), unsigned{cudaMemoryTypeHost});

  // pinscope's copy path kept using its registration of a.
  uint64_t a = M("a"), b = M("b"), check = M("check");
  const uint64_t n = 64 * 1024;
  ExpectCopies(t, {{pt::H2D, n, a, pt::PIN_REGISTERED},
                   {pt::H2D, n, b, pt::PIN_REGISTERED},
                   {pt::H2D, n, a, pt::PIN_CACHED},
                   {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  ExpectPins(t, {{pt::REGISTER, a, n, "malloc"},
                 {pt::REGISTER, b, n, "malloc"},
                 {pt::UNREGISTER, b, n, "program_register"},
                 {pt::UNREGISTER, a, n, "free"}});
  EXPECT_EQ(M("a_registered_after"), 1u);
}

}  // namespace
}  // namespace e2e_pinning

// OpenBLAS's kernel set: the generic Prescott fallback on a CPU it does not know is replaced
// at start-up by the set the CPU supports (util/BlasKernels).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "util/BlasKernels.hpp"

using kvscope::detail::BlasKernels;
using kvscope::detail::CpuVectorSupport;

namespace {
CpuVectorSupport cpuWith(bool avx2Fma, bool avx512) {
  CpuVectorSupport c;
  c.avx2Fma = avx2Fma;
  c.avx512 = avx512;
  return c;
}

std::string openblasCorenameNow() {
  using Fn = char* (*)();
  auto fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn && fn() ? fn() : "";
}
}  // namespace

TEST(BlasKernels, ThePrescottFallbackIsReplacedByWhatTheCpuSupports) {
  EXPECT_EQ(BlasKernels::replacementFor("Prescott", cpuWith(true, true)), "SkylakeX");
  EXPECT_EQ(BlasKernels::replacementFor("Prescott", cpuWith(true, false)), "Haswell");
  EXPECT_EQ(BlasKernels::replacementFor("Prescott", cpuWith(false, false)), "");
}

TEST(BlasKernels, AChoiceOpenBlasMadeForARecognisedCpuIsKept) {
  EXPECT_EQ(BlasKernels::replacementFor("Haswell", cpuWith(true, true)), "");
  EXPECT_EQ(BlasKernels::replacementFor("SkylakeX", cpuWith(true, true)), "");
  EXPECT_EQ(BlasKernels::replacementFor("Zen", cpuWith(true, false)), "");
  EXPECT_EQ(BlasKernels::replacementFor("", cpuWith(true, true)), "");  // not OpenBLAS
}

TEST(BlasKernels, TheStartupSelectionIsTheKernelSetInUse) {
  const auto& sel = BlasKernels::atStartup();
  if (sel.chosenAtLoad.empty()) GTEST_SKIP() << "the BLAS here is not OpenBLAS: " << sel.reason;
  EXPECT_EQ(sel.inUse, openblasCorenameNow());
  EXPECT_FALSE(sel.reason.empty());
  const std::string replacement =
      BlasKernels::replacementFor(sel.chosenAtLoad, CpuVectorSupport::ofThisCpu());
  if (sel.reason.find("switched") != std::string::npos) {
    EXPECT_EQ(sel.inUse, replacement) << sel.reason;
  } else {
    EXPECT_EQ(sel.inUse, sel.chosenAtLoad) << sel.reason;
    // Kept only when asked to, or when there was nothing better for this CPU.
    const bool asked = sel.reason.find("OPENBLAS_CORETYPE") != std::string::npos ||
                       sel.reason.find("KVSCOPE_BLAS_KERNELS") != std::string::npos;
    if (!asked) {
      EXPECT_EQ(replacement, "") << sel.reason;
    }
  }
}

TEST(BlasKernels, FloatProductsAreRightWithTheKernelsInUse) {
  // Products of every shape class the model runs (a decode row, a prefill block, a batch of
  // attention scores) against a sum computed in double.
  torch::manual_seed(11);
  for (auto [m, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 768, 2304}, {128, 768, 3072}, {37, 129, 65}}) {
    const auto a = torch::randn({m, k}), b = torch::randn({k, n});
    const auto exact = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
    const double err = (torch::mm(a, b).to(torch::kDouble) - exact).abs().max().item<double>();
    EXPECT_LT(err, 1e-3) << m << "x" << k << "x" << n;
  }
  const auto q = torch::randn({8, 16, 64}), kt = torch::randn({8, 64, 40});
  const auto exact = torch::bmm(q.to(torch::kDouble), kt.to(torch::kDouble));
  EXPECT_LT((torch::bmm(q, kt).to(torch::kDouble) - exact).abs().max().item<double>(), 1e-3);
}

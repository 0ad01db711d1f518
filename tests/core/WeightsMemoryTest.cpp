// Weights stay in their stored dtype (issue 11): BF16/F16 matrices are views of the file
// mapping, never a float32 copy of the model, and products against them are float32-
// accurate: the same model stored as float32 (the same values, upcast exactly) gives the
// same reference within 1e-4, through both the fused decode kernel and the blocked path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Model.hpp"
#include "model/ModelImpl.hpp"
#include "model/WeightMatmul.hpp"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

float maxRelDiff(const torch::Tensor& got, const torch::Tensor& want) {
  const float scale = std::max(1.0f, want.abs().max().item<float>());
  return (got - want).abs().max().item<float>() / scale;
}

TEST(WeightsMemory, StoredDtypeProductsMatchUpcastThenMatmul) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    for (int64_t K : {37, 64, 100}) {
      const int64_t N = 19;
      auto w = (torch::randn({N, K}) * 0.1).to(dtype);
      auto b = torch::randn({N});
      auto wf = w.to(torch::kFloat);
      for (int64_t M : {1, 3, 8, 9, 40}) {
        auto x = torch::randn({2, M, K});
        auto want = torch::nn::functional::linear(x, wf, b);
        auto got = detail::linearStored(x, w, b);
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_LT(maxRelDiff(got, want), 1e-5) << "linear K " << K << " M " << M;
        auto noBias = detail::linearStored(x, w, torch::Tensor());
        EXPECT_LT(maxRelDiff(noBias, torch::matmul(x, wf.t())), 1e-5);
        // GPT-2 Conv1D layout [in, out].
        auto wc = w.t().contiguous();
        auto gotC = detail::conv1dStored(x, wc, b);
        EXPECT_LT(maxRelDiff(gotC, torch::matmul(x, wc.to(torch::kFloat)) + b), 1e-5)
            << "conv1d K " << K << " M " << M;
      }
    }
  }
  EXPECT_NE(std::string(detail::fusedKernelName()), "");
}

TEST(WeightsMemory, EveryFusedRowCountMatchesAndARowDoesNotDependOnItsNeighbours) {
  // The fused kernel computes several weight rows against all input rows at once (a block
  // size per input-row count); each input row's result must be the one it gets alone, bit
  // for bit (a decode step batched with others computes what it computes solo).
  torch::manual_seed(5);
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    for (int64_t K : {16, 45, 2048}) {
      const int64_t N = 29;  // not a multiple of any row block
      auto w = (torch::randn({N, K}) * 0.1).to(dtype);
      const auto wf = w.to(torch::kFloat);
      for (int64_t M = 1; M <= detail::fusedMaxRows(); ++M) {
        const auto x = torch::randn({M, K});
        const auto got = detail::linearStored(x, w, torch::Tensor());
        EXPECT_LT(maxRelDiff(got, torch::matmul(x, wf.t())), 1e-5) << "K " << K << " M " << M;
        for (int64_t m = 0; m < M; ++m) {
          const auto alone = detail::linearStored(x.narrow(0, m, 1), w, torch::Tensor());
          EXPECT_TRUE(torch::equal(alone, got.narrow(0, m, 1)))
              << "K " << K << " M " << M << " row " << m;
        }
      }
    }
  }
}

TEST(WeightsMemory, Bf16MatricesAreViewsOfTheMapping) {
  CheckpointSpec spec = test::smallSpec();
  spec.storedDtype = SafetensorsDtype::BF16;
  const auto dir = test::writeScratchCheckpoint("weights-memory", "bf16-view", spec);
  auto model = Model::load(dir);
  const ModelImpl& m = model->impl();
  const auto& q = m.layers[0].qW;
  EXPECT_EQ(q.scalar_type(), torch::kBFloat16);
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  const auto& file = model->checkpoint().fileFor(name);
  EXPECT_EQ(q.data_ptr(), static_cast<const void*>(file.bytes(file.entry(name))));
  EXPECT_EQ(m.embed.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(m.layers[0].attnNormW.scalar_type(), torch::kFloat);  // vectors are converted
}

// The same weights stored as BF16 and as F32 (exact upcast): references agree within 1e-4.
void expectSameAsFloat32(Architecture arch, SafetensorsDtype dtype) {
  CheckpointSpec spec = test::smallSpec(arch);
  spec.storedDtype = dtype;
  const std::string tag = "weights-memory";
  const auto low = test::writeScratchCheckpoint(tag, "low-" + architectureName(arch), spec);
  const auto f32 = test::scratchDir(tag, "f32-" + architectureName(arch)).string();
  fs::copy(low, f32, fs::copy_options::recursive);
  test::rewriteTensors(f32, [](const std::string&, FloatTensor&) { return true; },
                       SafetensorsDtype::F32);
  auto a = Model::load(low), b = Model::load(f32);
  ASSERT_EQ(b->storedDtype(), "F32");
  if (arch == Architecture::Gpt2) {
    // Row counts around the blocked Conv1D path (blocked variants got rows wrong).
    for (int64_t M : {1, 2, 4, 5, 6, 7}) {
      auto x = torch::randn({1, M, 32});
      const auto& la = a->impl().layers[0];
      const auto& lb = b->impl().layers[0];
      EXPECT_LT(maxRelDiff(detail::conv1dStored(x, la.qkvW, la.qkvB),
                           detail::conv1dStored(x, lb.qkvW, lb.qkvB)), 1e-5) << "M " << M;
      EXPECT_LT(maxRelDiff(detail::conv1dStored(x, la.upW, la.upB),
                           detail::conv1dStored(x, lb.upW, lb.upB)), 1e-5) << "fc M " << M;
    }
  }
  for (size_t len : {size_t{1}, size_t{5}, size_t{8}, size_t{23}}) {  // fused and blocked paths
    std::vector<int64_t> ids;
    for (size_t i = 0; i < len; ++i) ids.push_back(static_cast<int64_t>((i * 37 + 11) % 256));
    const auto ra = a->reference(ids), rb = b->reference(ids);
    for (size_t h = 0; h < ra.hiddenStates.size(); ++h)
      EXPECT_TRUE(test::closeTo(ra.hiddenStates[h], rb.hiddenStates[h], 1e-4f)) << "hidden " << h << " T " << len;
    EXPECT_TRUE(test::closeTo(ra.logits, rb.logits, 1e-4f)) << architectureName(arch) << " T " << len;
    EXPECT_TRUE(test::closeTo(ra.keys.back(), rb.keys.back(), 1e-4f));
  }
  // The cached engine decodes through the fused kernel: same tokens as float32.
  RequestSpec req;
  req.promptIds = {3, 4, 5};
  req.maxNewTokens = 6;
  req.stopAtEos = false;
  EngineOptions opts;
  const auto ta = Engine(a).run({req}, opts), tb = Engine(b).run({req}, opts);
  EXPECT_EQ(ta.requests.at(0).generated, tb.requests.at(0).generated);
}

TEST(WeightsMemory, Bf16LlamaMatchesFloat32) { expectSameAsFloat32(Architecture::Llama, SafetensorsDtype::BF16); }
TEST(WeightsMemory, F16Qwen2MatchesFloat32) { expectSameAsFloat32(Architecture::Qwen2, SafetensorsDtype::F16); }
TEST(WeightsMemory, Bf16Gpt2MatchesFloat32) { expectSameAsFloat32(Architecture::Gpt2, SafetensorsDtype::BF16); }

TEST(WeightsMemory, WeightUpdateOfABf16TensorComputesInFloat32) {
  CheckpointSpec spec = test::smallSpec();
  spec.storedDtype = SafetensorsDtype::BF16;
  const auto dir = test::writeScratchCheckpoint("weights-memory", "bf16-update", spec);
  auto model = Model::load(dir);
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  const auto before = model->impl().layers[0].kW.to(torch::kFloat);
  model->applyWeightUpdate(name, 0.1f, 7);
  const auto& after = model->impl().layers[0].kW;
  EXPECT_EQ(after.scalar_type(), torch::kFloat);
  EXPECT_GT((after - before).abs().max().item<float>(), 0.0f);
  EXPECT_NO_THROW(model->reference({1, 2, 3}));
}

}  // namespace
}  // namespace kvscope

// Attention in query chunks (AttentionContext::queryRows): a forward whose [B, h, s, t]
// scores would outgrow the budget attends a few query rows at a time. Each query's softmax
// and context are its own, so the chunked forward computes what the whole one does: the
// families' features that act per query row (Gemma 2's soft-cap, GPT-OSS's sinks, sliding
// windows, an audit hypothesis dropping a feature from one query on) kept across chunk edges.
#include <gtest/gtest.h>

#include <cmath>

#include "TestSupport.hpp"
#include "kvscope/Model.hpp"
#include "model/KvTapCollector.hpp"
#include "model/ModelImpl.hpp"

using namespace kvscope;

namespace {

struct Pass {
  torch::Tensor logits;
  std::vector<torch::Tensor> keys, values;
};

// One uncached forward over `ids`; `scoreElements` > 0 chunks the queries to fit it, and
// `softcapFrom` >= 0 drops the soft-cap of layer 1 from that query on.
Pass run(const Model& m, const std::vector<int64_t>& ids, int64_t scoreElements, int64_t softcapFrom = -1) {
  torch::InferenceMode guard;
  const auto T = static_cast<int64_t>(ids.size());
  kvscope::detail::UncachedAttention attention(torch::ones({1, T}, torch::kBool), m.impl().layerWindows);
  if (scoreElements > 0) attention.limitScoreElements(scoreElements);
  if (softcapFrom >= 0) attention.setDroppedQueries(kvscope::detail::AttentionFeature::Softcap, 1, softcapFrom);
  kvscope::detail::KvTapCollector taps(/*withLogits=*/true);
  m.impl().forward(torch::tensor(ids, torch::kLong).view({1, T}), torch::arange(T, torch::kLong).view({1, T}),
                   attention, &taps);
  return {taps.logits.clone(), taps.keys, taps.values};
}

double worst(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1.0, b.abs().max().item<double>());
}

// Float32 rounding of the other matmul shapes a chunk takes, relative to the largest value
// (measured: up to 1.7e-6 through GPT-OSS's layers on an AMD EPYC, under 1e-6 elsewhere); a
// feature lost at a chunk edge moves them by more than 1e-4.
constexpr double kChunkRounding = 1e-5;

TEST(QueryChunks, AChunkedForwardComputesTheWholeOnesResult) {
  const std::vector<int64_t> ids = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64, 8, 9, 10, 11, 90, 91, 92};
  for (const char* f : {"gemma2", "gpt_oss", "qwen3", "mixtral"}) {
    auto m = Model::load(test::fixture(std::string("families/models/") + f));
    const int64_t heads = m->config().numHeads, T = static_cast<int64_t>(ids.size());
    const int64_t budget = heads * T * 3;  // 3 query rows per chunk: 6 chunks, edges everywhere
    ASSERT_EQ(kvscope::detail::AttentionContext::queryRows(1, heads, T, T, budget), 3);
    ASSERT_EQ(kvscope::detail::AttentionContext::queryRows(1, heads, T, T), T);  // the default: whole
    const Pass whole = run(*m, ids, 0), chunked = run(*m, ids, budget);
    EXPECT_LT(worst(chunked.logits, whole.logits), kChunkRounding) << f;
    for (size_t l = 0; l < whole.keys.size(); ++l) {
      EXPECT_LT(worst(chunked.keys[l], whole.keys[l]), kChunkRounding) << f << " layer " << l;
      EXPECT_LT(worst(chunked.values[l], whole.values[l]), kChunkRounding) << f << " layer " << l;
    }
  }
}

TEST(QueryChunks, AFeatureDroppedFromOneQueryOnKeepsItsEdgeAcrossChunks) {
  // Gemma 2's soft-cap dropped on layer 1 from query 7 on (inside the third chunk of 3 rows):
  // the layers after it differ from the capped run from position 7 on exactly as unchunked.
  auto m = Model::load(test::fixture("families/models/gemma2"));
  const std::vector<int64_t> ids = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64, 8, 9};
  const int64_t budget = m->config().numHeads * static_cast<int64_t>(ids.size()) * 3;
  const Pass whole = run(*m, ids, 0, 7), chunked = run(*m, ids, budget, 7), capped = run(*m, ids, 0);
  EXPECT_LT(worst(chunked.logits, whole.logits), kChunkRounding);
  const auto& k2 = whole.keys.at(2);
  EXPECT_LT(worst(chunked.keys.at(2), k2), kChunkRounding);
  EXPECT_LT(worst(k2.narrow(1, 0, 7), capped.keys.at(2).narrow(1, 0, 7)), kChunkRounding);  // before: the same
  EXPECT_GT(worst(k2.narrow(1, 7, 5), capped.keys.at(2).narrow(1, 7, 5)), 1e-4);  // from 7: not
}

}  // namespace

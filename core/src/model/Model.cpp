#include "kvscope/Model.hpp"

#include <algorithm>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "kvscope/Error.hpp"
#include "model/AllocationGuard.hpp"
#include "model/ModelImpl.hpp"
#include "model/families/ModelFamily.hpp"
#include "util/BlasKernels.hpp"
#include "util/HeapTuning.hpp"

namespace kvscope {

namespace detail {
FloatTensor toFloatTensor(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat).contiguous();
  FloatTensor out;
  out.shape = c.sizes().vec();
  out.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return out;
}

torch::Tensor fromFloatTensor(const FloatTensor& t) {
  return torch::from_blob(const_cast<float*>(t.data.data()), t.shape, torch::kFloat).clone();
}
}  // namespace detail

namespace {
// Intra-op threads: below ~2k hidden units the cost of waking threads exceeds the work of a
// decode step (measured on the 2-core CI machine: 40 steps of the 64-wide fixtures take
// 22 ms with 1 thread and ~1 s with 2; a GPT-2-small decode is 1.8x slower with 2), so
// such models run single-threaded. OMP_NUM_THREADS always wins.
void configureThreads(int64_t hiddenSize) {
  // The BLAS kernels were re-selected for this CPU before main (util/BlasKernels); naming the
  // selection here also links it into every program that runs a model.
  (void)detail::BlasKernels::atStartup();
  (void)detail::HeapTuning::atStartup();  // likewise the allocator's thresholds (util/HeapTuning)
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);  // read now too: it may have changed since start-up
    if (n > 0) torch::set_num_threads(n);
    return;
  }
  const unsigned n = std::thread::hardware_concurrency();
  torch::set_num_threads(hiddenSize >= 2048 && n > 1 ? static_cast<int>(n) : 1);
}

// Collects per-layer K/V and hidden states of batch row 0.
class ReferenceCollector : public detail::TorchTapSink {
 public:
  ReferenceCollector(ReferenceRun& run, const PassWatch& watch, int64_t layers,
                     std::vector<int64_t> checkpoints = {}, bool keepHidden = true)
      : run_(run), watch_(watch), layers_(layers), keepHidden_(keepHidden), checkpoints_(std::move(checkpoints)) {
    for (auto* v : {&run_.keys, &run_.values, &run_.convStates, &run_.recurrentStates})
      v->resize(static_cast<size_t>(layers));
  }
  bool wants(const std::string& name) const override {
    return name == "k_proj" || name == "v_proj" || name == "hidden" || name == "embed" ||
           name == "final" || name == "conv_state" || name == "recurrent_state" ||
           name == "conv_state_at" || name == "recurrent_state_at";
  }
  void onTensor(int64_t layer, const std::string& name, const torch::Tensor& t) override {
    auto row = detail::toFloatTensor(t.select(0, 0));
    // Per layer (a recurrent layer's keys stay empty, an attention layer's states).
    auto at = [&](std::vector<FloatTensor>& v) -> FloatTensor& { return v.at(static_cast<size_t>(layer)); };
    if (name == "k_proj") at(run_.keys) = std::move(row);
    else if (name == "v_proj") at(run_.values) = std::move(row);
    else if (name == "conv_state") at(run_.convStates) = std::move(row);
    else if (name == "recurrent_state") at(run_.recurrentStates) = std::move(row);
    else if (name == "conv_state_at" || name == "recurrent_state_at") {
      // One per state checkpoint, in order (DeltaNetBlock.cpp).
      auto& seen = name == "conv_state_at" ? convSeen_ : recurrentSeen_;
      if (seen.size() < static_cast<size_t>(layers_)) seen.resize(static_cast<size_t>(layers_));
      const size_t k = seen[static_cast<size_t>(layer)]++;
      if (k >= checkpoints_.size()) return;
      auto& states = run_.statesAt[checkpoints_[k]];
      auto& v = name == "conv_state_at" ? states.conv : states.recurrent;
      if (v.size() < static_cast<size_t>(layers_)) v.resize(static_cast<size_t>(layers_));
      v[static_cast<size_t>(layer)] = std::move(row);
    }
    else if (!keepHidden_) {}  // the hidden states are not asked for: [T, H] per layer saved
    else if (name == "final") final_ = std::move(row);
    else layerOutputs_.push_back(std::move(row));  // embed, then each layer's output
    if (name != "hidden") return;
    ++layersDone_;
    if (watch_.progress) watch_.progress(layersDone_, layers_);
    if (watch_.cancelled && watch_.cancelled()) throw AuditCancelled();
  }
  // transformers' hidden_states: the embeddings, each layer's output except the last,
  // then the final-normed output of the last layer.
  void finish() {
    if (!keepHidden_) return;
    if (!layerOutputs_.empty()) layerOutputs_.pop_back();
    run_.hiddenStates = std::move(layerOutputs_);
    run_.hiddenStates.push_back(std::move(final_));
  }

 private:
  ReferenceRun& run_;
  const PassWatch& watch_;
  const int64_t layers_;
  const bool keepHidden_;
  int64_t layersDone_ = 0;
  std::vector<FloatTensor> layerOutputs_;
  FloatTensor final_;
  std::vector<int64_t> checkpoints_;          // the stream lengths the states are kept after
  std::vector<size_t> convSeen_, recurrentSeen_;  // per layer: checkpoints reported so far
};
}  // namespace

std::shared_ptr<Model> Model::load(const std::string& dir) {
  std::shared_ptr<Model> m(new Model());
  m->impl_ = std::make_unique<ModelImpl>();
  m->impl_->checkpoint = Checkpoint::open(dir);
  m->impl_->config = m->impl_->checkpoint->config();
  configureThreads(m->impl_->config.hiddenSize);
  detail::guardAllocations("loading " + dir, [&] { m->impl_->loadWeights(); });
  return m;
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->config; }
const Checkpoint& Model::checkpoint() const { return *impl_->checkpoint; }
const std::string& Model::fingerprint() const { return impl_->checkpoint->fingerprint(); }

const std::string& Model::fingerprint(
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  const Checkpoint& c = *impl_->checkpoint;
  while (progress && !c.fingerprintReady()) {
    const auto [done, total] = c.fingerprintProgress();
    if (total > 0) progress(done, total);  // 0 until the hash has sized its files
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return c.fingerprint();
}
const std::string& Model::storedDtype() const { return impl_->checkpoint->storedDtype(); }
int64_t Model::embeddingRows() const { return impl_->embed.size(0); }
uint64_t Model::weightsVersion() const { return impl_->weightsVersion; }

std::vector<std::string> Model::weightNames() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : impl_->byName) out.push_back(n);
  return out;
}

void Model::applyWeightUpdate(const std::string& tensorName, float scale, uint64_t seed) {
  auto it = impl_->byName.find(tensorName);
  if (it == impl_->byName.end()) throw UsageError("no weight tensor named '" + tensorName + "'");
  torch::NoGradGuard ng;
  torch::Tensor& t = *it->second;
  const bool tiedHead = impl_->lmHead.defined() && impl_->lmHead.is_same(t);
  auto gen = at::detail::createCPUGenerator(seed);
  auto noise = at::normal(0.0, 1.0, t.sizes(), gen);
  // In float32 whatever the stored dtype (the updated tensor is float32 from now on).
  const auto base = t.to(torch::kFloat);
  auto stdv = base.std().item<float>();
  t = base.clone() + scale * (stdv > 0 ? stdv : 1.0f) * noise;  // copy: the mapping stays read-only
  if (tiedHead) impl_->lmHead = t;
  if (tensorName == familyOf(impl_->config.architecture).weightNames().embed &&
      impl_->config.tieWordEmbeddings)
    impl_->lmHead = t;
  ++impl_->weightsVersion;
}

namespace {
// The logits rows a pass over `tokens` positions computes and keeps (ReferenceKeep).
int64_t keptLogitRows(int64_t tokens, const ReferenceKeep& keep) {
  return tokens - ModelImpl::firstLogitsColumn(keep.logitsFrom, tokens);
}
}  // namespace

MemoryNeed Model::referenceMemory(int64_t tokens, const ReferenceKeep& keep) const {
  const ModelConfig& c = impl_->config;
  const int64_t rows = keptLogitRows(tokens, keep);
  MemoryNeed m = impl_->forwardMemory(1, tokens, tokens, rows);
  const auto f = [](int64_t n) { return static_cast<uint64_t>(n) * sizeof(float); };
  // ReferenceRun keeps the logits rows asked for, the hidden states if asked, each layer's K/V.
  m.kept = f(rows * c.vocabSize) + (keep.hiddenStates ? f((c.numLayers + 2) * tokens * c.hiddenSize) : 0) +
           f(c.numLayers * c.numKvHeads * tokens * (c.headDim + c.cacheValueDim()));
  return m;
}

std::string Model::checkReferenceMemory(int64_t tokens, const ReferenceKeep& keep) const {
  return referenceMemory(tokens, keep).check(
      MemoryAvailable::now(),
      "the uncached reference over " + std::to_string(tokens) + " tokens",
      "use a shorter prompt, audit in trace+trace mode (kvscope-cli audit --reference-trace A "
      "--trace B loads no model), or a machine with more memory");
}

ReferenceRun Model::reference(const std::vector<int64_t>& ids, const KvQuantization& cache,
                              const PassWatch& watch, int64_t prefill, const ExpertGuide* experts,
                              const std::vector<int64_t>& statesAfter, const ReferenceKeep& keep) const {
  std::string note = checkReferenceMemory(static_cast<int64_t>(ids.size()), keep);
  ReferenceRun run = detail::guardAllocations(
      "the uncached reference over " + std::to_string(ids.size()) + " tokens",
      [&] { return referenceUnchecked(ids, cache, watch, prefill, experts, statesAfter, keep); });
  run.memoryNote = std::move(note);
  return run;
}

namespace {
// Rows [0, rows) along `axis` of `to` replaced by `from`'s (same shape but along `axis`).
void overwriteRows(FloatTensor& to, const FloatTensor& from, size_t axis, int64_t rows) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= to.shape[i];
  for (size_t i = axis + 1; i < to.shape.size(); ++i) inner *= to.shape[i];
  const int64_t tAll = to.shape[axis], tFrom = from.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(from.data.begin() + o * tFrom * inner, rows * inner, to.data.begin() + o * tAll * inner);
}
}  // namespace

ReferenceRun Model::referenceUnchecked(const std::vector<int64_t>& ids, const KvQuantization& cache,
                                       const PassWatch& watch, int64_t prefill,
                                       const ExpertGuide* experts, const std::vector<int64_t>& statesAfter,
                                       const ReferenceKeep& keep) const {
  // LongRoPE turns a forward with its long factors once the forward's longest position passes
  // the original context S. When the prefill fit in S, the rows fed before S were turned with
  // the short factors by the forwards that fed them (the prefill, then one step per row): they
  // come from a pass over the first S tokens alone; the later rows from the whole stream's.
  const int64_t switchAt = impl_->rope ? impl_->rope->factorSwitch() : 0;
  const auto T = static_cast<int64_t>(ids.size());
  if (prefill < 0 || prefill > T) prefill = T;
  ReferenceRun run = onePass(ids, cache, watch, experts, statesAfter, keep);
  if (switchAt > 0 && T > switchAt && prefill <= switchAt) {
    const ReferenceRun prefix =
        onePass(std::vector<int64_t>(ids.begin(), ids.begin() + switchAt), cache, watch, experts, {}, keep);
    // Both passes' logits begin at the same position where the prefix has rows to give.
    if (switchAt > run.logitsFrom) overwriteRows(run.logits, prefix.logits, 0, switchAt - run.logitsFrom);
    for (size_t l = 0; l < run.keys.size(); ++l) {
      overwriteRows(run.keys[l], prefix.keys[l], 1, switchAt);
      overwriteRows(run.values[l], prefix.values[l], 1, switchAt);
    }
    for (size_t h = 0; h < run.hiddenStates.size(); ++h)
      overwriteRows(run.hiddenStates[h], prefix.hiddenStates[h], 0, switchAt);
    // The rows before the switch are the prefix pass's: so are their routing decisions.
    std::vector<RoutingDecision> routing;
    for (auto& d : prefix.routing)
      if (d.token < switchAt) routing.push_back(d);
    for (auto& d : run.routing)
      if (d.token >= switchAt) routing.push_back(d);
    run.routing = std::move(routing);
    run.passes = 2;
  }
  return run;
}

ReferenceRun Model::onePass(const std::vector<int64_t>& ids, const KvQuantization& cache,
                            const PassWatch& watch, const ExpertGuide* experts,
                            const std::vector<int64_t>& statesAfter, const ReferenceKeep& keep) const {
  ReferenceRun run;
  run.ids = ids;
  run.weightsVersion = impl_->weightsVersion;
  // The checkpoints a recurrent layer can keep: ascending, within the pass.
  std::vector<int64_t> checkpoints;
  if (impl_->config.hasRecurrentLayers())
    for (const int64_t n : statesAfter)
      if (n >= 1 && n <= static_cast<int64_t>(ids.size()) && (checkpoints.empty() || n > checkpoints.back()))
        checkpoints.push_back(n);
  ReferenceCollector collector(run, watch, impl_->config.numLayers, checkpoints, keep.hiddenStates);
  auto idT = torch::tensor(ids, torch::kLong).view({1, -1});
  const int64_t T = idT.size(1);
  run.logitsFrom = ModelImpl::firstLogitsColumn(keep.logitsFrom, T);
  auto pos = torch::arange(T, torch::kLong).view({1, -1});
  const detail::KvQuantizer rounding(cache);
  detail::UncachedAttention attention(torch::ones({1, T}, torch::kBool), impl_->layerWindows,
                                      &rounding);
  if (experts && impl_->config.moe.numExperts > 0) attention.followExperts(experts, &run.routing);
  attention.keepStatesAfter(checkpoints);
  auto logits = impl_->forward(idT, pos, attention, &collector, run.logitsFrom);
  collector.finish();
  run.logits = detail::toFloatTensor(logits.select(0, 0));
  return run;
}

FloatTensor Model::referenceWithTaps(const std::vector<int64_t>& ids, TensorSink& sink) const {
  checkReferenceMemory(static_cast<int64_t>(ids.size()));
  return detail::guardAllocations("the uncached reference over " + std::to_string(ids.size()) + " tokens",
                                  [&] { return referenceWithTapsUnchecked(ids, sink); });
}

FloatTensor Model::referenceWithTapsUnchecked(const std::vector<int64_t>& ids, TensorSink& sink) const {
  detail::FloatTensorSinkAdapter adapter(sink);
  auto idT = torch::tensor(ids, torch::kLong).view({1, -1});
  const int64_t T = idT.size(1);
  auto pos = torch::arange(T, torch::kLong).view({1, -1});
  detail::UncachedAttention attention(torch::ones({1, T}, torch::kBool), impl_->layerWindows);
  return detail::toFloatTensor(impl_->forward(idT, pos, attention, &adapter).select(0, 0));
}

}  // namespace kvscope

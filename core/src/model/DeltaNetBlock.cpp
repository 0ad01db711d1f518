// ModelImpl::deltaNetBlock: a Gated DeltaNet layer (Qwen3.5's linear_attention), as transformers'
// Qwen3_5GatedDeltaNet computes it: padding zeroed, q|k|v through the causal depthwise conv
// (SiLU), the gated delta rule (GatedDeltaRule.hpp: the chunked form, or the recurrent one for a
// single-token step from a held state), the output RMS-normed per value head and gated by
// silu(z), out_proj. A one-row forward may keep the states after given lengths (the
// reference's recorded steps, the engine's drafts and prefix blocks).
#include <cmath>

#include "model/GatedDeltaRule.hpp"
#include "model/ModelImpl.hpp"
#include "model/Norms.hpp"
#include "model/WeightMatmul.hpp"

namespace kvscope {

torch::Tensor ModelImpl::deltaNetBlock(int64_t layer, const torch::Tensor& xIn, detail::AttentionContext& attention,
                                       detail::TorchTapSink* taps) const {
  namespace F = torch::nn::functional;
  const auto& w = layers[static_cast<size_t>(layer)];
  const DeltaNetConfig& dn = config.deltaNet;
  const int64_t B = xIn.size(0), s = xIn.size(1), K = dn.convKernel, C = dn.convDim();
  const int64_t Hv = dn.valueHeads, Hk = dn.keyHeads, Dk = dn.keyHeadDim, Dv = dn.valueHeadDim;
  torch::Tensor x = xIn;
  if (const torch::Tensor real = attention.realEntries(layer); real.defined())
    x = x * real.view({B, s, 1}).to(x.scalar_type());
  torch::Tensor mixed, z, b, a;  // [B, C, s], [B, s, Hv, Dv], [B, s, Hv] twice
  if (w.dnQkvzW.defined()) {  // Qwen3-Next: fused per key-head group, put in q | k | v | z and b | a order
    const auto qkvz = detail::linearStored(x, w.dnQkvzW, {}).index_select(-1, dnQkvzOrder);
    mixed = qkvz.narrow(-1, 0, C).transpose(1, 2);
    z = qkvz.narrow(-1, C, Hv * Dv).reshape({B, s, Hv, Dv});
    const auto ba = detail::linearStored(x, w.dnBaW, {}).index_select(-1, dnBaOrder);
    b = ba.narrow(-1, 0, Hv);
    a = ba.narrow(-1, Hv, Hv);
  } else {
    mixed = detail::linearStored(x, w.dnQkvW, {}).transpose(1, 2);
    z = detail::linearStored(x, w.dnZW, {}).view({B, s, Hv, Dv});
    b = detail::linearStored(x, w.dnBW, {});
    a = detail::linearStored(x, w.dnAW, {});
  }
  const detail::RecurrentState held = attention.recurrentState(layer);
  // The conv over the held inputs, then the fed ones; its state: the last K inputs.
  const torch::Tensor before = held.conv.defined() ? held.conv : torch::zeros({B, C, K}, mixed.options());
  const auto inputs = torch::cat({before, mixed}, -1);  // [B, C, K + s]
  const auto conv = F::conv1d(inputs, w.dnConvW.to(torch::kFloat), F::Conv1dFuncOptions().groups(C));
  auto convOut = conv.narrow(-1, conv.size(-1) - s, s);  // [B, C, s]
  detail::RecurrentState next;
  next.conv = inputs.narrow(-1, inputs.size(-1) - K, K).contiguous();
  // The prefix_state hypothesis: from fed entry `restart` on, the conv sees zeros before it.
  const int64_t restart = attention.stateRestart();
  const bool restarts = restart > 0 && restart < s;
  if (restarts) {
    const int64_t rest = s - restart;
    const auto fresh = torch::cat({torch::zeros({B, C, K}, mixed.options()), mixed.narrow(-1, restart, rest)}, -1);
    const auto tail = F::conv1d(fresh, w.dnConvW.to(torch::kFloat), F::Conv1dFuncOptions().groups(C));
    convOut = torch::cat({convOut.narrow(-1, 0, restart), tail.narrow(-1, tail.size(-1) - rest, rest)}, -1);
    next.conv = fresh.narrow(-1, fresh.size(-1) - K, K).contiguous();
  }
  const auto qkv = torch::silu(convOut).transpose(1, 2);  // [B, s, C]
  auto q = qkv.narrow(-1, 0, Hk * Dk).reshape({B, s, Hk, Dk});
  auto k = qkv.narrow(-1, Hk * Dk, Hk * Dk).reshape({B, s, Hk, Dk});
  const auto v = qkv.narrow(-1, 2 * Hk * Dk, Hv * Dv).reshape({B, s, Hv, Dv});
  const auto beta = torch::sigmoid(b);
  const auto g = -w.dnALog.to(torch::kFloat).exp() * F::softplus(a.to(torch::kFloat) + w.dnDtBias.to(torch::kFloat));
  if (Hv != Hk) {
    q = q.repeat_interleave(Hv / Hk, 2);
    k = k.repeat_interleave(Hv / Hk, 2);
  }
  // The rule over fed entries [from, to) from `state`: the recurrent form for a single-token
  // step from a held state (a cached decode), the chunked form otherwise.
  auto run = [&](int64_t from, int64_t to, const torch::Tensor& state) {
    const auto part = [&](const torch::Tensor& t) { return from == 0 && to == s ? t : t.narrow(1, from, to - from); };
    return state.defined() && to - from == 1
               ? detail::recurrentGatedDeltaRule(part(q), part(k), part(v), part(g), part(beta), state)
               : detail::chunkedGatedDeltaRule(part(q), part(k), part(v), part(g), part(beta), state);
  };
  detail::DeltaRuleResult rule;
  const std::vector<int64_t>& keep = attention.statesAfter();
  if (restarts) {
    const detail::DeltaRuleResult head = run(0, restart, held.state), tail = run(restart, s, torch::Tensor());
    rule = {torch::cat({head.out, tail.out}, 1), tail.state};
  } else if (keep.empty() || B != 1) {
    rule = run(0, s, held.state);
  } else {
    // A reference that keeps the states after given lengths: the rule in segments ending
    // there, each segment's state reported (the conv's: the K inputs before the length).
    std::vector<torch::Tensor> outs;
    torch::Tensor state = held.state;
    int64_t from = 0;
    for (const int64_t n : keep) {
      if (n <= from || n > s) continue;
      const detail::DeltaRuleResult part = run(from, n, state);
      outs.push_back(part.out);
      state = part.state;
      from = n;
      const detail::RecurrentState after{inputs.narrow(-1, n, K).contiguous(), state};
      attention.keepStateAfter(layer, n, after);
      detail::tapTensor(taps, layer, "conv_state_at", after.conv);
      detail::tapTensor(taps, layer, "recurrent_state_at", state);
    }
    if (from < s) {
      const detail::DeltaRuleResult tail = run(from, s, state);
      outs.push_back(tail.out);
      state = tail.state;
    }
    rule = {torch::cat(outs, 1), state};
  }
  next.state = rule.state;
  detail::tapTensor(taps, layer, "conv_state", next.conv);
  detail::tapTensor(taps, layer, "recurrent_state", next.state);
  attention.keepRecurrentState(layer, next);
  // RMSNormGated: the plain weight, then silu(z), per (token, value head).
  auto out = detail::rmsNorm(rule.out, w.dnNormW, config.normEps) * torch::silu(z.to(torch::kFloat));
  out = detail::linearStored(out.reshape({B, s, Hv * Dv}), w.dnOutW, {});
  detail::tapTensor(taps, layer, "attn_out", out);
  return out;
}

}  // namespace kvscope

#include "model/GatedDeltaRule.hpp"

namespace kvscope::detail {

namespace {
namespace F = torch::nn::functional;

// FLA's l2norm: x / sqrt(sum x^2 + eps) over the last axis.
torch::Tensor l2Norm(const torch::Tensor& x) { return x * torch::rsqrt((x * x).sum(-1, true) + 1e-6); }

// [B, s, H, D] -> [B, H, s, D] float32 contiguous.
torch::Tensor headsFirst(const torch::Tensor& x) { return x.transpose(1, 2).to(torch::kFloat).contiguous(); }

torch::Tensor startState(const torch::Tensor& initial, int64_t B, int64_t H, int64_t Dk, int64_t Dv) {
  return initial.defined() ? initial.to(torch::kFloat) : torch::zeros({B, H, Dk, Dv}, torch::kFloat);
}
}  // namespace

DeltaRuleResult chunkedGatedDeltaRule(const torch::Tensor& qIn, const torch::Tensor& kIn, const torch::Tensor& vIn,
                                      const torch::Tensor& gIn, const torch::Tensor& betaIn,
                                      const torch::Tensor& initial, int64_t C) {
  const int64_t B = kIn.size(0), s = kIn.size(1), H = vIn.size(2), Dk = kIn.size(3), Dv = vIn.size(3);
  torch::Tensor q = l2Norm(headsFirst(qIn)), k = l2Norm(headsFirst(kIn)), v = headsFirst(vIn);
  torch::Tensor beta = betaIn.transpose(1, 2).to(torch::kFloat), g = gIn.transpose(1, 2).to(torch::kFloat);  // [B, H, s]
  q = q * (1.0 / std::sqrt(static_cast<double>(Dk)));
  // Padded to whole chunks with zeros (a zero key and rate change nothing).
  const int64_t pad = (C - s % C) % C, n = (s + pad) / C;
  q = F::pad(q, F::PadFuncOptions({0, 0, 0, pad}));
  k = F::pad(k, F::PadFuncOptions({0, 0, 0, pad}));
  v = F::pad(v, F::PadFuncOptions({0, 0, 0, pad}));
  beta = F::pad(beta, F::PadFuncOptions({0, pad}));
  g = F::pad(g, F::PadFuncOptions({0, pad}));
  auto vBeta = v * beta.unsqueeze(-1), kBeta = k * beta.unsqueeze(-1);
  auto chunks = [&](const torch::Tensor& x) { return x.reshape({B, H, n, C, x.size(-1)}); };
  q = chunks(q);
  k = chunks(k);
  kBeta = chunks(kBeta);
  vBeta = chunks(vBeta);
  const auto decay = g.reshape({B, H, n, C}).cumsum(-1);  // log decay from the chunk's start
  const auto upper = torch::ones({C, C}, torch::kBool).triu(1);
  const auto pairwise = (decay.unsqueeze(-1) - decay.unsqueeze(-2)).masked_fill(upper, -INFINITY).exp();
  const auto system = torch::matmul(kBeta, k.transpose(-1, -2)) * pairwise;  // the UT transform's
  const auto intra = torch::matmul(q, k.transpose(-1, -2)) * pairwise;
  const auto decayedKBeta = kBeta * decay.exp().unsqueeze(-1);
  const auto values = torch::linalg_solve_triangular(system, vBeta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  const auto kCumDecay =
      torch::linalg_solve_triangular(system, decayedKBeta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  torch::Tensor S = startState(initial, B, H, Dk, Dv);
  const auto qDecayed = q * decay.exp().unsqueeze(-1);
  const auto kDecayed = k * (decay.narrow(-1, C - 1, 1) - decay).exp().unsqueeze(-1);
  const auto chunkDecay = decay.select(-1, C - 1).exp().unsqueeze(-1).unsqueeze(-1);  // [B, H, n, 1, 1]
  auto out = torch::zeros({B, H, n, C, Dv}, torch::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    const auto vNew = values.select(2, i) - torch::matmul(kCumDecay.select(2, i), S);
    out.select(2, i).copy_(torch::matmul(qDecayed.select(2, i), S) + torch::matmul(intra.select(2, i), vNew));
    S = S * chunkDecay.select(2, i) + torch::matmul(kDecayed.select(2, i).transpose(-1, -2), vNew);
  }
  out = out.reshape({B, H, n * C, Dv}).narrow(2, 0, s).transpose(1, 2).contiguous();
  return {out, S};
}

DeltaRuleResult recurrentGatedDeltaRule(const torch::Tensor& qIn, const torch::Tensor& kIn, const torch::Tensor& vIn,
                                        const torch::Tensor& gIn, const torch::Tensor& betaIn,
                                        const torch::Tensor& initial) {
  const int64_t B = kIn.size(0), s = kIn.size(1), H = vIn.size(2), Dk = kIn.size(3), Dv = vIn.size(3);
  torch::Tensor q = l2Norm(headsFirst(qIn)), k = l2Norm(headsFirst(kIn)), v = headsFirst(vIn);
  const auto beta = betaIn.transpose(1, 2).to(torch::kFloat), g = gIn.transpose(1, 2).to(torch::kFloat);
  q = q / std::sqrt(static_cast<double>(Dk));
  torch::Tensor S = startState(initial, B, H, Dk, Dv);
  auto out = torch::zeros({B, H, s, Dv}, torch::kFloat);
  for (int64_t t = 0; t < s; ++t) {
    const auto qt = q.select(2, t), kt = k.select(2, t), vt = v.select(2, t);  // [B, H, D]
    S = S * g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    const auto memory = (S * kt.unsqueeze(-1)).sum(-2);  // S^T k: [B, H, Dv]
    const auto delta = (vt - memory) * beta.select(2, t).unsqueeze(-1);
    S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2);
    out.select(2, t).copy_((S * qt.unsqueeze(-1)).sum(-2));
  }
  return {out.transpose(1, 2).contiguous(), S};
}

}  // namespace kvscope::detail

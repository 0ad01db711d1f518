#include "ui/SyntheticAuditFactory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace kvscope::ui {

namespace {

constexpr double kTolerance = 1e-4;

// Deterministic "projection" values for (layer, head, position, dim) of one kind.
float kvValue(int64_t layer, int64_t head, int64_t position, int64_t dim, KvKind kind) {
  const double k = kind == KvKind::Keys ? 0.0 : 1.7;
  const double v = std::sin(0.37 * static_cast<double>(position) + 0.91 * static_cast<double>(dim) +
                            1.3 * static_cast<double>(head) + 2.1 * static_cast<double>(layer) + k) *
                       (1.0 + 0.15 * static_cast<double>(layer)) +
                   0.25 * std::cos(0.11 * static_cast<double>(position * (dim + 1)));
  return static_cast<float>(v);
}

// fp32-sized noise that depends on every coordinate.
float noise(int64_t a, int64_t b, int64_t c, int64_t d) {
  const double x = std::sin(12.9898 * static_cast<double>(a) + 78.233 * static_cast<double>(b) +
                            37.719 * static_cast<double>(c) + 4.581 * static_cast<double>(d));
  return static_cast<float>(2e-7 * x);
}

float referenceLogit(int64_t request, int64_t position, int64_t token, int64_t vocab) {
  const int64_t favourite = (7 * position + 3 * request + 5) % vocab;
  double v = 2.0 * std::sin(0.21 * static_cast<double>(token) + 0.5 * static_cast<double>(position)) +
             std::cos(0.05 * static_cast<double>(token * (request + 1)));
  if (token == favourite) v += 6.0;
  return static_cast<float>(v);
}

int64_t argmax(const std::vector<float>& row) {
  return static_cast<int64_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

std::string SyntheticAuditFactory::piece(int64_t id) {
  static const std::array<const char*, 24> words = {
      " the", " cache", " key", " value", " layer", " token", " model", " attends",
      " to", " every", " position", " of", " a", " prompt", " and", " writes",
      " its", " own", " record", ".", ",", " once", " again", " here"};
  const auto n = static_cast<int64_t>(words.size());
  std::string w = words[static_cast<size_t>(id % n)];
  if (id >= n) w += std::to_string(id / n);
  return w;
}

AuditJobOutput SyntheticAuditFactory::make(const SyntheticAuditOptions& o) {
  AuditJobOutput out;
  AuditResult& result = out.result;
  Trace& trace = result.trace;
  trace.engine = "kvscope synthetic";
  trace.mode = "cached";
  trace.model.architecture = "llama";
  trace.model.directory = "(synthetic)";
  trace.model.numLayers = o.layers;
  trace.model.numKvHeads = o.kvHeads;
  trace.model.numHeads = o.kvHeads * 2;
  trace.model.headDim = o.headDim;
  trace.model.vocabSize = o.vocab;
  trace.model.maxPositions = 4096;
  trace.model.storedDtype = "F32";
  if (o.divergent) {
    trace.faults.push_back("wrong_layer:layer=" + std::to_string(o.plantLayer) +
                           ",source=" + std::to_string(o.plantLayer - 1));
    if (o.crossRequest && o.requests > 1) trace.faults.push_back("cross_request:request=0,victim=1");
  }

  const int64_t L = o.layers, H = o.kvHeads, D = o.headDim, V = o.vocab;
  AuditReport& report = result.report;
  report.mode = "model+engine";
  report.inputDescription = "synthetic audit (no model)";
  report.dtype = "float32";
  report.toleranceBase = 1e-5;

  for (int64_t r = 0; r < o.requests; ++r) {
    TraceRequest req;
    req.id = r;
    for (int64_t i = 0; i < o.promptLength; ++i) req.promptIds.push_back((r * 5 + i * 3 + 1) % V);
    req.maxNewTokens = o.steps;
    req.stopReason = "max_new_tokens";
    req.arrivalTick = r * 2;
    const bool planted = o.divergent && r == o.plantRequest;
    const bool victim = o.divergent && o.crossRequest && r == 1 && o.requests > 1;
    const int64_t victimStep = 2;

    RequestReference ref;
    ref.request = r;
    ref.ids = req.promptIds;
    const int64_t T = o.promptLength + o.steps - 1;  // real tokens fed over all steps
    ref.logits = FloatTensor::zeros({T, V});
    for (int64_t l = 0; l < L; ++l) {
      ref.keys.push_back(FloatTensor::zeros({H, T, D}));
      ref.values.push_back(FloatTensor::zeros({H, T, D}));
    }
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t p = 0; p < T; ++p)
          for (int64_t j = 0; j < D; ++j) {
            const size_t i = static_cast<size_t>((h * T + p) * D + j);
            // Request-specific projections: the same position differs between requests.
            ref.keys[static_cast<size_t>(l)].data[i] = kvValue(l, h, p + 3 * r, j, KvKind::Keys);
            ref.values[static_cast<size_t>(l)].data[i] = kvValue(l, h, p + 3 * r, j, KvKind::Values);
          }
    for (int64_t p = 0; p < T; ++p)
      for (int64_t v = 0; v < V; ++v)
        ref.logits.data[static_cast<size_t>(p * V + v)] = referenceLogit(r, p, v, V);

    int64_t consumed = 0;
    std::vector<int64_t> cacheLen(static_cast<size_t>(L), 0);
    for (int64_t s = 0; s < o.steps; ++s) {
      TraceStep st;
      st.request = r;
      st.step = s;
      st.tick = s + req.arrivalTick;
      st.slot = r;
      if (s == 0) {
        st.fedIds = req.promptIds;
      } else {
        st.fedIds = {req.generated.back()};
        ref.ids.push_back(req.generated.back());
      }
      const auto n = static_cast<int64_t>(st.fedIds.size());
      for (int64_t i = 0; i < n; ++i) st.positions.push_back(consumed + i);
      if (s == 0) st.events.push_back("arrival");
      const bool wrongLayerHere = planted && s >= o.plantStep;
      const bool mixedHere = victim && s >= victimStep;
      for (int64_t l = 0; l < L; ++l) {
        TraceLayerRecord rec;
        rec.keys = FloatTensor::zeros({H, n, D});
        rec.values = FloatTensor::zeros({H, n, D});
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < D; ++j) {
              const int64_t p = consumed + i;
              int64_t srcLayer = l, srcReq = r;
              if (wrongLayerHere && l == o.plantLayer) srcLayer = o.plantLayer - 1;
              if (mixedHere) srcReq = 0;
              const size_t k = static_cast<size_t>((h * n + i) * D + j);
              rec.keys.data[k] = kvValue(srcLayer, h, p + 3 * srcReq, j, KvKind::Keys) +
                                 noise(l, h, p, j);
              rec.values.data[k] = kvValue(srcLayer, h, p + 3 * srcReq, j, KvKind::Values) +
                                   noise(l, h, p, j + 101);
              if (wrongLayerHere && l > o.plantLayer) {
                // Later layers see a changed hidden state: their new records drift too.
                const float drift = 0.35f * std::sin(1.7f * static_cast<float>(j) + 0.3f * static_cast<float>(p) +
                                                     static_cast<float>(l));
                rec.keys.data[k] += drift;
                rec.values.data[k] -= drift;
              }
            }
        cacheLen[static_cast<size_t>(l)] += n;
        rec.cacheLength = cacheLen[static_cast<size_t>(l)];
        st.layers.push_back(std::move(rec));
      }
      consumed += n;
      // The logits row: reference + noise, shifted where the cache is wrong.
      std::vector<float> row(static_cast<size_t>(V));
      const int64_t last = consumed - 1;
      for (int64_t v = 0; v < V; ++v) {
        float x = referenceLogit(r, last, v, V) + 10.0f * noise(r, s, v, 7);
        if (wrongLayerHere) {
          // A broad shift plus a few tokens that move a lot (max 3.699, the method's figure).
          const float fv = static_cast<float>(v);
          float shift = 0.6f * std::sin(0.7f * fv + static_cast<float>(s)) * std::cos(0.13f * fv);
          const int64_t every = std::max<int64_t>(7, std::min<int64_t>(97, V / 4));
          if ((v + 5 * s) % every == 0) shift = (v % 2 ? -3.699f : 3.699f);
          x += shift;
        }
        if (mixedHere) x += 1.25f * std::cos(0.3f * static_cast<float>(v * (s + 1)));
        row[static_cast<size_t>(v)] = x;
      }
      st.logits = FloatTensor({V}, row);
      st.chosenToken = argmax(row);
      req.generated.push_back(st.chosenToken);

      // Per-step numerics, as the audit reports them.
      StepNumerics sn;
      sn.request = r;
      sn.step = s;
      sn.position = last;
      std::vector<float> refRow(ref.logits.data.begin() + last * V,
                                ref.logits.data.begin() + (last + 1) * V);
      double maxErr = 0.0;
      for (int64_t v = 0; v < V; ++v)
        maxErr = std::max(maxErr, static_cast<double>(std::abs(row[static_cast<size_t>(v)] -
                                                                refRow[static_cast<size_t>(v)])));
      sn.maxLogitError = maxErr;
      sn.tolerance = kTolerance;
      std::vector<float> sorted = refRow;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      sn.top2Margin = sorted.size() > 1 ? static_cast<double>(sorted[0] - sorted[1]) : 0.0;
      sn.nearTie = sn.top2Margin < maxErr;
      sn.referenceToken = argmax(refRow);
      sn.chosenToken = st.chosenToken;
      for (int64_t l = 0; l < L; ++l) {
        double ke = 0.0, ve = 0.0;
        const auto& rec = st.layers[static_cast<size_t>(l)];
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < D; ++j) {
              const size_t k = static_cast<size_t>((h * n + i) * D + j);
              const size_t rk = static_cast<size_t>((h * T + consumed - n + i) * D + j);
              ke = std::max(ke, static_cast<double>(std::abs(rec.keys.data[k] -
                                                             ref.keys[static_cast<size_t>(l)].data[rk])));
              ve = std::max(ve, static_cast<double>(std::abs(rec.values.data[k] -
                                                             ref.values[static_cast<size_t>(l)].data[rk])));
            }
        sn.keyError.push_back(ke);
        sn.valueError.push_back(ve);
      }
      sn.diverged = maxErr > kTolerance;
      report.steps.push_back(sn);
      trace.steps.push_back(std::move(st));
    }
    std::vector<std::string> pieces;
    for (int64_t id : req.promptIds) pieces.push_back(piece(id));
    std::string text;
    for (int64_t id : req.generated) {
      pieces.push_back(piece(id));
      text += piece(id);
    }
    req.promptText.clear();
    for (int64_t id : req.promptIds) req.promptText += piece(id);
    out.tokenPieces.push_back(std::move(pieces));
    out.decodedText.push_back(text);
    trace.requests.push_back(std::move(req));
    result.references.push_back(std::move(ref));
  }
  // Recording order: by engine tick.
  std::stable_sort(trace.steps.begin(), trace.steps.end(),
                   [](const TraceStep& a, const TraceStep& b) { return a.tick < b.tick; });

  auto stage = [](int n, const char* id, const char* title, StageStatus st, std::string summary,
                  std::vector<std::string> checks) {
    StageResult s;
    s.number = n;
    s.id = id;
    s.title = title;
    s.status = st;
    s.summary = std::move(summary);
    s.checks = std::move(checks);
    return s;
  };
  const std::string pl = std::to_string(o.plantLayer), src = std::to_string(o.plantLayer - 1);
  const std::string ps = std::to_string(o.plantStep), pr = std::to_string(o.plantRequest);
  const int64_t plantPosition = o.promptLength + o.plantStep - 1;
  const bool mixed = o.divergent && o.crossRequest && o.requests > 1;
  if (o.divergent) {
    report.verdict = "divergent";
    report.firstDivergence = {true, o.plantRequest, o.plantStep, o.plantLayer, plantPosition};
    Finding f;
    f.id = "wrong_layer";
    f.matrixRow = "layer 1 matches, layer 2 differs";
    f.firstCheck = "layer 2's cache source and append";
    f.request = o.plantRequest;
    f.step = o.plantStep;
    f.layer = o.plantLayer;
    f.position = plantPosition;
    f.confidence = 0.97;
    f.explanation = "layer " + pl + " reads layer " + src + "'s K/V";
    f.evidence = {{"key_error_layer_" + src, 2e-7},
                  {"key_error_layer_" + pl, 0.0},
                  {"max_abs_logit_error", 3.699},
                  {"distance_to_layer_" + src + "_records", 2e-7}};
    double ke = 0.0;
    for (const auto& sn : report.steps)
      if (sn.request == o.plantRequest && sn.step == o.plantStep)
        ke = sn.keyError[static_cast<size_t>(o.plantLayer)];
    f.evidence["key_error_layer_" + pl] = ke;
    report.findings.push_back(f);
    if (mixed) {
      Finding c;
      c.id = "cross_request";
      c.matrixRow = "a batch row changes when another request arrives";
      c.firstCheck = "cache mixing across the batch or request axes";
      c.request = 1;
      c.step = 2;
      c.layer = 0;
      c.position = o.promptLength + 1;
      c.confidence = 0.88;
      c.explanation = "request 1's cache holds request 0's K/V records from step 2 (every layer)";
      c.evidence = {{"records_matching_request_0", 1.0}, {"max_abs_logit_error", 1.25}};
      report.findings.push_back(c);
    }
  }
  report.stages.push_back(stage(1, "reference", "Uncached reference", StageStatus::Pass,
                                "reference logits computed for every request",
                                {"ok: inference mode, no dropout", "ok: vocabulary matches embedding rows"}));
  report.stages.push_back(
      o.divergent
          ? stage(2, "cache", "Cache construction", StageStatus::Fail,
                  "layer " + pl + "'s records equal layer " + src + "'s from step " + ps +
                      " (request " + pr + ")",
                  {"ok: one K and one V tensor per layer", "ok: cache length equals inputs consumed",
                   "FAIL: layer " + pl + " records at step " + ps + " differ from the uncached projection"})
          : stage(2, "cache", "Cache construction", StageStatus::Pass, "every record matches",
                  {"ok: every new K/V record equals the uncached projection"}));
  report.stages.push_back(
      mixed ? stage(3, "positions", "Positions and request state", StageStatus::Fail,
                    "request 1's cache changed when request 0 decoded",
                    {"ok: decode positions continue from the prompt length",
                     "FAIL: request 1 holds request 0's records"})
            : stage(3, "positions", "Positions and request state", StageStatus::Pass,
                    "positions continue from the prompt length",
                    {"ok: decode positions continue from the prompt length"}));
  report.stages.push_back(stage(4, "numerics", "Numerical equivalence",
                                o.divergent ? StageStatus::Fail : StageStatus::Pass,
                                o.divergent ? "max |delta logit| 3.699 > tolerance 1e-4"
                                            : "max |delta logit| within 1e-4",
                                {"tolerance 1e-4 (float32)"}));
  report.stages.push_back(stage(5, "policy", "Policy", o.divergent ? StageStatus::Skipped : StageStatus::Pass,
                                o.divergent ? "skipped: logits already differ" : "greedy, ties to lowest",
                                {}));
  report.stages.push_back(stage(6, "stopping", "Stopping", StageStatus::Pass,
                                "max_new_tokens reached", {"ok: maximum new tokens"}));
  report.stopSummary = "every request stopped at max_new_tokens";
  return out;
}

}  // namespace kvscope::ui

#include "kvscope/FaultSpec.hpp"

#include <sstream>

#include "kvscope/Error.hpp"

namespace kvscope {

const std::vector<FaultInfo>& FaultSpec::catalog() {
  static const std::vector<FaultInfo> faults = {
      {"wrong_position",
       "decode positions are off by `offset` (or restart at 0 with restart=1) from step `step` on",
       "mismatch begins at a token together with a position offset",
       {{"offset", "added to every position id", "1"},
        {"restart", "1: positions restart at 0 instead of continuing", "0"},
        {"step", "first step affected (0 = prefill)", "1"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"wrong_layer",
       "layer `layer` stores (and so reads back) layer `source`'s K/V records",
       "layer 1 matches, layer 2 differs",
       {{"layer", "the layer whose cache is written wrongly", "1"},
        {"source", "the layer whose records it stores", "0"},
        {"step", "first step affected", "0"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"duplicate_append",
       "the new K/V records of `layer` (-1 = every layer) are appended twice at step `step`",
       "cache length grows by two in one step",
       {{"layer", "layer affected (-1 = all)", "-1"},
        {"step", "the step affected", "1"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"duplicate_prompt_token",
       "the last prompt token is fed again together with the first generated token",
       "cache length grows by two in one step",
       {{"request", "request affected (-1 = all)", "-1"}}},
      {"cross_request",
       "request `request` is given request `victim`'s cache row when it arrives and overwrites it",
       "a batch row changes when another request arrives",
       {{"request", "the arriving request", "1"},
        {"victim", "the request whose row is reused", "0"}}},
      {"batch_row_mix",
       "in a batched forward, row `from`'s new records are written into row `to` as well",
       "a batch row changes when another request arrives",
       {{"from", "source request", "0"},
        {"to", "request whose row is overwritten", "1"},
        {"step", "first step affected", "1"},
        {"layer", "layer affected (-1 = all)", "-1"}}},
      {"stale_cache",
       "the weights are updated at tick `tick` but the cache built with the old weights is kept",
       "cache works until the weights update",
       {{"tick", "engine tick of the weight update", "3"},
        {"layer", "layer whose k_proj is updated", "0"},
        {"scale", "update size in percent of the tensor's std", "50"}}},
      {"tie_rule_last",
       "greedy ties go to the highest index while the recorded policy says lowest",
       "greedy token differs but logits match",
       {{"request", "request affected (-1 = all)", "-1"}}},
      {"rng_extra_draw",
       "one extra random draw happens before step `step` (sampled runs)",
       "sampled runs differ but probabilities match",
       {{"step", "step before which the extra draw happens", "2"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"rng_reseed",
       "the random generator is re-seeded with the request seed before every step from `step` on",
       "sampled runs differ but probabilities match",
       {{"step", "first step re-seeded", "1"}, {"request", "request affected (-1 = all)", "-1"}}},
      {"speculative_rollback",
       "speculative decoding (`draft` draft tokens per step, enabled if --speculative is not "
       "given) whose rollback is skipped from step `step` on: the rejected drafts' K/V rows of "
       "`layer` (-1 = every layer) stay in the cache",
       "cache length exceeds the accepted tokens by the rejected drafts",
       {{"draft", "draft tokens proposed per decode step (when speculation is not on already)",
         "3"},
        {"step", "first step whose rollback is skipped", "1"},
        {"layer", "layer not rolled back (-1 = all)", "-1"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"kv_quantization",
       "a quantised KV cache (int8 per token and kv head when --kv-cache is not given) whose "
       "records of `layer` are dequantised with `scale` percent of their scale from step `step` "
       "on (a wrong scale)",
       "the error of a record exceeds its quantisation step",
       {{"scale", "the dequantisation scale used, in percent of the right one", "200"},
        {"step", "first step affected (0 = prefill)", "1"},
        {"layer", "layer affected (-1 = all)", "0"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"rope_scaling",
       "from step `step` on, the cached path rotates the queries and keys of `layer` (-1 = every "
       "layer) with the unscaled RoPE frequencies: the checkpoint's rope_scaling (linear, "
       "llama3, dynamic) is dropped on that path; needs a RoPE checkpoint with rope_scaling "
       "(not gpt2, which has no RoPE)",
       "key error grows with position while values at layer 0 are exact",
       {{"step", "first step affected (0 = prefill)", "1"},
        {"layer", "layer affected (-1 = all)", "-1"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"chunk_position",
       "chunked prefill (`size` tokens per chunk, enabled if --prefill-chunk is not given) "
       "whose positions restart at 0 at every chunk boundary from chunk `chunk` on (positions "
       "computed per chunk): with layer=-1 the chunk's position ids (fed and recorded) restart; "
       "with layer=L (RoPE models only) the recorded ids are right and layer L's queries and "
       "keys are rotated at the chunk-local positions; gpt2 takes positions once, at its input "
       "(learned position embeddings), so it takes layer=-1 only",
       "from a chunk boundary on, layer-0 keys equal the same tokens' at other positions",
       {{"chunk", "first chunk affected (1 = the second chunk; chunk 0 is always right)", "1"},
        {"size", "prompt tokens per chunk (when --prefill-chunk is not given)", "4"},
        {"layer", "layer rotated at the wrong positions (-1 = all: the position ids themselves)",
         "-1"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"batch_variance",
       "batch-invariant batching (enabled if --batch-invariant is not given; needs --batch) "
       "whose q/k/v projections of `layer` (-1 = every layer) switch, from step `step` on, to a "
       "split-K reduction with as many parts as the batch has members, as GEMM heuristics choose "
       "split-K by batch size: a request's records and logits then differ from its solo run at "
       "float noise",
       "logits differ from the solo run at float noise with no cache-row evidence",
       {{"step", "first step affected (0 = prefill)", "1"},
        {"layer", "layer affected (-1 = all)", "0"},
        {"request", "request affected (-1 = all)", "-1"}}},
      {"window_off_by_one",
       "the sliding-window mask keeps one key too many (window + 1) in the cached path",
       "layer 1 matches, layer 2 differs",
       {{"layer", "layer affected (-1 = every sliding layer)", "-1"}}},
      {"prefix_reuse",
       "prefix caching (enabled with `block` if --prefix-cache is not given) whose block lookup "
       "compares a block without its last token (a hash over too few tokens), so a prompt that "
       "differs from an earlier one only there is handed that prompt's block: rows computed for "
       "another token, which the rest of the prefill attends over; with layer=L only layer L's "
       "rows come from that block (a per-layer block table), the others are computed",
       "the reused rows equal another request's reference from the block's last token on",
       {{"layer", "layer handed the wrong block (-1 = every layer)", "-1"},
        {"block", "prefix-cache block size in tokens, when --prefix-cache is not given", "4"},
        {"request", "request whose lookup is wrong (-1 = all)", "-1"}}},
      {"window_wrap",
       "ring-buffer sliding-window caches (enabled if --ring-window is not given) that, in every "
       "forward after a layer's ring has wrapped (a decode step after a prompt longer than the "
       "window too), write each entry one slot back ((cache index - 1) mod slots): the entry "
       "overwritten is one the next query still needs, and the slot map says so",
       "a ring layer's slot map loses a needed position at the first wrapped step",
       {{"layer", "sliding layer affected (-1 = every sliding layer)", "-1"},
        {"request", "request affected (-1 = all)", "-1"}}},
  };
  return faults;
}

std::string FaultSpec::helpText() {
  std::ostringstream os;
  os << "Fault SPEC syntax: NAME[:key=value[,key=value...]] (repeat --fault to combine)\n";
  for (const auto& f : catalog()) {
    os << "  " << f.name << ": " << f.description << "\n";
    for (const auto& p : f.parameters)
      os << "      " << p.name << "=" << p.defaultValue << "  " << p.meaning << "\n";
  }
  return os.str();
}

FaultSpec FaultSpec::parse(const std::string& text) {
  FaultSpec spec;
  const auto colon = text.find(':');
  spec.name = text.substr(0, colon);
  const FaultInfo* info = nullptr;
  for (const auto& f : catalog())
    if (f.name == spec.name) info = &f;
  if (!info) {
    std::string names;
    for (const auto& f : catalog()) names += (names.empty() ? "" : ", ") + f.name;
    throw UsageError("unknown fault '" + spec.name + "' in --fault '" + text + "' (known: " + names + ")");
  }
  for (const auto& p : info->parameters) spec.params[p.name] = std::stoll(p.defaultValue);
  if (colon == std::string::npos) return spec;
  std::stringstream rest(text.substr(colon + 1));
  std::string item;
  while (std::getline(rest, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || !spec.params.count(key)) {
      std::string keys;
      for (const auto& p : info->parameters) keys += (keys.empty() ? "" : ", ") + p.name;
      throw UsageError("fault '" + spec.name + "': bad parameter '" + item + "' (expected key=value with key one of: " + keys + ")");
    }
    const std::string value = item.substr(eq + 1);
    try {
      size_t used = 0;
      spec.params[key] = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      throw UsageError("fault '" + spec.name + "': parameter '" + key + "' needs an integer, got '" + value + "'");
    }
  }
  return spec;
}

std::string FaultFiring::describe() const {
  if (!fired) return "never fired: " + reason;
  std::string where;
  auto add = [&](const char* what, int64_t v) {
    if (v >= 0) where += (where.empty() ? " at " : ", ") + std::string(what) + " " + std::to_string(v);
  };
  add("request", request);
  add("step", step);
  add("layer", layer);
  return "fired" + where;
}

int64_t FaultSpec::get(const std::string& key) const { return params.at(key); }

std::string FaultSpec::toString() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    out += sep + k + "=" + std::to_string(v);
    sep = ',';
  }
  return out;
}

}  // namespace kvscope

#include "trace/SavedCacheTrace.hpp"

#include "kvscope/Error.hpp"

namespace kvscope::detail {

std::vector<int64_t> savedCacheTokens(const std::string& path, const std::string& field,
                                      const std::vector<int64_t>& named, const std::vector<int64_t>& given) {
  if (!named.empty() && !given.empty() && named != given)
    throw InputError(path, field,
                     "the cache names its " + std::to_string(named.size()) + " tokens, and the " +
                         std::to_string(given.size()) + " given (--ids / --prompt) are not those");
  if (named.empty() && given.empty())
    throw InputError(path, field,
                     "the cache names no tokens: give the ids or the text it was made from "
                     "(kvscope-cli audit --ids / --prompt; the inspector's Prompts field)");
  return named.empty() ? given : named;
}

Trace savedCacheTrace(const std::string& engine, const std::string& path, const ModelConfig& config,
                      const std::vector<int64_t>& tokens, std::vector<int64_t> positions,
                      std::vector<TraceLayerRecord> layers, bool latentHeads) {
  Trace t;
  t.engine = engine;
  t.mode = "cached";
  t.model = TraceModelInfo::ofConfig(config, latentHeads);
  t.model.directory = path;
  if (config.mla.enabled()) {  // every layer's rows: latent rows and roped key parts
    TraceLayerKind latent;
    latent.latent = true;
    t.layerKinds.assign(static_cast<size_t>(config.numLayers), latent);
  }
  if (config.hasRecurrentLayers()) {  // Gated DeltaNet layers: a state, no rows
    t.layerKinds.resize(static_cast<size_t>(config.numLayers));
    for (int64_t l = 0; l < config.numLayers; ++l)
      t.layerKinds[static_cast<size_t>(l)].recurrent = config.isRecurrentLayer(l);
  }
  TraceRequest r;
  r.promptIds = tokens;
  r.stopReason = "unknown";
  t.requests.push_back(r);
  TraceStep step;
  step.fedIds = tokens;
  step.positions = std::move(positions);
  step.events = {"arrival"};
  step.layers = std::move(layers);
  t.steps.push_back(std::move(step));
  return t;
}

}  // namespace kvscope::detail

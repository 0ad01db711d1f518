#include "audit/rows/RowRegistry.hpp"

#include <algorithm>
#include <stdexcept>

#include "audit/rows/Rows.hpp"

namespace kvscope::detail {

// The order the audit asks the rows. Every question goes to every row in this order:
//  - at a structural step every row may claim (several findings at once); a row that can
//    cause another (RowSpec::causes) is asked before it, so the consequence finds its root;
//  - at a request's first value divergence the first row that explains the records (or the
//    logits) wins, then the nearest rows are asked the same way; so a row with a narrower,
//    stronger signature stands before one whose evidence it would otherwise look like.
// Adding a row: its module (a folder under rows/ with its spec, detectors and fault
// descriptions), one accessor in Rows.hpp, one line here, its fault in the engine, its tests.
const std::vector<const FailureRow*>& RowRegistry::rows() {
  static const std::vector<const FailureRow*> ordered = {
      // A chunk boundary whose positions restart explains wrong positions and wrong keys
      // before the position row or the signature search read them as an offset.
      &rows::chunkPosition(),
      // The q/k norm applied after RoPE: keys re-derived exactly from the checkpoint's k_norm
      // weight; their error grows with position from 0 at position 0 as a RoPE scaling
      // mismatch's does, so asked before rope_scaling, whose hypotheses cannot fit it.
      &rows::qkNormOrder(),
      // no_rope_layers read inverted: the same signature as a swapped norm order (keys wrong
      // from position 1, exact at 0, values exact); each row re-derives every record from
      // its own hypothesis, so the two never claim one run. Before rope_scaling for the
      // same reason as qk_norm_order.
      &rows::nopeLayerRope(),
      // A layer rotated with the other layer type's RoPE (Gemma 3's local / global): the
      // same signature again, its own re-derivation (the reference key unrotated with the
      // layer's RoPE, rotated with the other).
      &rows::layerRopeTheta(),
      // Partial rotary turned over the whole head: the same signature, three re-derivations
      // (the whole head, the head width's frequencies on the rotary pairs, the rotary
      // frequencies on the head width's pairs).
      &rows::partialRotary(),
      // YaRN's attention factor dropped or mis-derived: keys wrong at every position (position
      // 0 too), values exact; every record is the reference key with its rotated features
      // scaled by one constant.
      &rows::yarnAttentionFactor(),
      // A dropped attention soft-cap: a layer's records exact, the next one's keys and values
      // wrong; claimed only when an uncached pass without the cap reproduces every record.
      &rows::softcapDropped(),
      // Dropped attention sinks: the same signature as a dropped soft-cap but from position 0
      // on; claimed only when an uncached pass without the sinks reproduces every record.
      &rows::sinkDropped(),
      // Absorbed latent attention with kv_b_proj split in the wrong layout: the same signature
      // again (a layer's latent rows exact, the next one's wrong), from the first decode step;
      // claimed only when an uncached pass with those weights reproduces every record.
      &rows::mlaAbsorb(),
      // DeepSeek's softmax scale without yarn's mscale^2: the same signature (a layer's rows
      // exact, the next one's wrong) from the prefill on, position 0 right (one key: any scale
      // gives it weight 1); claimed only when an uncached pass so scored reproduces every record.
      &rows::scoreMscale(),
      // A chunked layer masked as a sliding window of the chunk: the same signature as a
      // dropped feature (a layer's records exact, the next one's wrong) but only past the
      // first chunk; claimed only when an uncached pass with that mask reproduces every record.
      &rows::chunkMask(),
      // A left-padded request's query temperature taken at its cache index: the same signature
      // once more, only on a padded request; claimed when the shifted temperature reproduces it.
      &rows::temperaturePosition(),
      // A recurrent layer's state wrong below every wrong record: asked on its own question
      // (explainState) before the records; without recorded states, a nearest answer only.
      // A step that rejected drafts or took a prefix hit since the last right state names the
      // narrower cause first (each re-derives the state it would leave).
      &rows::stateRollback(),
      &rows::prefixState(),
      &rows::recurrentState(),
      // A token routed to other experts than the checkpoint's router picks, beyond the near-tie
      // margin (the trace records the engine's experts): the layers up to the router's exact,
      // the next layers' records wrong from that token on. After the dropped-feature rows,
      // whose changed attention output reroutes tokens as a consequence.
      &rows::expertRouting(),
      // Keys rotated with another RoPE scaling: before the position probe, which reads a
      // dropped linear factor f as the right key at f x the position.
      &rows::ropeScaling(),
      // Structural roots: rows left by a skipped rollback or a duplicate append inflate the
      // cache length that later positions are taken from (causes: position).
      &rows::speculativeRollback(),
      &rows::windowWrap(),
      &rows::prefixReuse(),
      &rows::duplicateAppend(),
      // Positions, ownership, the layer a cache stores, and the signature search's three
      // answers (one match; the three rows claim disjoint kinds).
      &rows::position(),
      &rows::crossRequest(),
      &rows::wrongLayer(),
      &rows::staleCache(),
      &rows::contextLimit(),
      // Asked after every signature: a quantised cache's error is explained only when no
      // layer, position or request explains the values.
      &rows::kvQuantization(),
      // No signature and the sequence outgrew the window: the window's trimming.
      &rows::slidingWindow(),
      // Nothing explains layer 0's records: the reference itself (nearest row).
      &rows::reference(),
      // Outside the walk: the policy stage (logits held fixed), the solo-run comparison,
      // and precision drift (steps before any divergence).
      &rows::tieRule(),
      &rows::rngOrder(),
      &rows::batchVariance(),
      &rows::drift(),
  };
  return ordered;
}

const std::vector<const FailureRow*>& RowRegistry::listed() {
  static const std::vector<const FailureRow*> table = [] {
    auto out = rows();
    std::stable_sort(out.begin(), out.end(), [](const FailureRow* a, const FailureRow* b) {
      return a->spec().listing < b->spec().listing;
    });
    return out;
  }();
  return table;
}

const FailureRow& RowRegistry::row(const std::string& id) {
  for (const FailureRow* r : rows())
    if (id == r->id()) return *r;
  throw std::out_of_range("unknown finding id '" + id + "'");
}

void FailureRow::describe(Finding& f) const {
  f.matrixRow = spec().observation;
  f.firstCheck = spec().firstCheck;
}

}  // namespace kvscope::detail

#include "model/HfConfigFiles.hpp"

#include "model/ByteLevelBpeBuilder.hpp"

namespace kvscope::hf {

using nlohmann::json;

namespace {

const char* versionFor(ConfigStyle s) { return s == ConfigStyle::V4 ? "4.46.3" : "5.0.0"; }

// rope_scaling (v4) / rope_parameters (v5) entries beyond the type.
void addRopeScaling(json& o, const CheckpointSpec& s) {
  if (s.ropeType == "default") return;
  o["factor"] = s.ropeFactor;
  if (s.ropeType == "llama3") {
    o["low_freq_factor"] = s.ropeLowFreqFactor;
    o["high_freq_factor"] = s.ropeHighFreqFactor;
  }
  if (s.ropeOriginalMaxPositions > 0 && (s.ropeType == "llama3" || s.ropeType == "dynamic"))
    o["original_max_position_embeddings"] = s.ropeOriginalMaxPositions;
}

void addRope(json& c, const CheckpointSpec& s) {
  if (s.configStyle == ConfigStyle::V4) {
    c["rope_theta"] = s.ropeTheta;
    if (s.ropeType == "default") {
      c["rope_scaling"] = nullptr;
    } else {
      json scaling = json::object();
      scaling["rope_type"] = s.ropeType;
      addRopeScaling(scaling, s);
      c["rope_scaling"] = scaling;
    }
  } else {
    json params = json::object();
    params["rope_theta"] = s.ropeTheta;
    params["rope_type"] = s.ropeType;
    addRopeScaling(params, s);
    c["rope_parameters"] = params;
  }
}

json gpt2Config(const CheckpointSpec& s) {
  json c = json::object();
  c["activation_function"] = "gelu_new";
  c["add_cross_attention"] = false;
  c["architectures"] = json::array({"GPT2LMHeadModel"});
  c["attn_pdrop"] = 0.1;
  c["embd_pdrop"] = 0.1;
  c["layer_norm_epsilon"] = s.normEps > 0 ? s.normEps : 1e-05;
  c["model_type"] = "gpt2";
  c["n_embd"] = s.hiddenSize;
  c["n_head"] = s.numHeads;
  c["n_inner"] = s.intermediateSize == 4 * s.hiddenSize ? json(nullptr) : json(s.intermediateSize);
  c["n_layer"] = s.numLayers;
  c["n_positions"] = s.maxPositions;
  c["reorder_and_upcast_attn"] = false;
  c["resid_pdrop"] = 0.1;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["scale_attn_weights"] = true;
  c["summary_activation"] = nullptr;
  c["summary_first_dropout"] = 0.1;
  c["summary_proj_to_labels"] = true;
  c["summary_type"] = "cls_index";
  c["summary_use_proj"] = true;
  return c;
}

json decoderConfig(const CheckpointSpec& s) {
  json c = json::object();
  c["attention_dropout"] = 0.0;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hiddenSize;
  c["intermediate_size"] = s.intermediateSize;
  c["max_position_embeddings"] = s.maxPositions;
  c["num_attention_heads"] = s.numHeads;
  c["num_hidden_layers"] = s.numLayers;
  c["num_key_value_heads"] = s.numKvHeads;
  c["rms_norm_eps"] = s.normEps > 0 ? s.normEps : 1e-06;
  addRope(c, s);
  switch (s.architecture) {
    case Architecture::Llama:
      c["architectures"] = json::array({"LlamaForCausalLM"});
      c["model_type"] = "llama";
      c["attention_bias"] = s.attentionBias;
      c["head_dim"] = s.resolvedHeadDim();
      c["mlp_bias"] = false;
      c["pretraining_tp"] = 1;
      break;
    case Architecture::Mistral:
      c["architectures"] = json::array({"MistralForCausalLM"});
      c["model_type"] = "mistral";
      c["head_dim"] = s.resolvedHeadDim();
      c["sliding_window"] = s.slidingWindow > 0 ? json(s.slidingWindow) : json(nullptr);
      break;
    case Architecture::Qwen2:
    case Architecture::Qwen3: {
      const bool qwen3 = s.architecture == Architecture::Qwen3;
      c["architectures"] = json::array({qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"});
      c["model_type"] = qwen3 ? "qwen3" : "qwen2";
      if (qwen3) {
        c["attention_bias"] = false;
        c["head_dim"] = s.resolvedHeadDim();
      } else if (s.headDim > 0) {
        c["head_dim"] = s.headDim;
      }
      c["use_sliding_window"] = s.useSlidingWindow;
      c["max_window_layers"] = s.maxWindowLayers;
      // transformers 5 stores the window only when it is used, and the per-layer choice.
      const bool keepWindow =
          s.slidingWindow > 0 && (s.configStyle == ConfigStyle::V4 || s.useSlidingWindow);
      c["sliding_window"] = keepWindow ? json(s.slidingWindow) : json(nullptr);
      if (s.configStyle == ConfigStyle::V5) {
        json types = json::array();
        for (int64_t i = 0; i < s.numLayers; ++i)
          types.push_back(s.useSlidingWindow && s.slidingWindow > 0 && i >= s.maxWindowLayers
                              ? "sliding_attention"
                              : "full_attention");
        c["layer_types"] = types;
      }
      break;
    }
    case Architecture::Gpt2:
      break;
  }
  return c;
}

std::string tokenString(const std::vector<std::string>& tokens, int64_t id) {
  return tokens.at(static_cast<size_t>(id));
}

}  // namespace

std::string torchDtypeName(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::F16:
      return "float16";
    case SafetensorsDtype::BF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

json configJson(const CheckpointSpec& s) {
  json c = s.architecture == Architecture::Gpt2 ? gpt2Config(s) : decoderConfig(s);
  c["bos_token_id"] = s.resolvedBosId();
  c["eos_token_id"] = s.resolvedEosId();
  c["pad_token_id"] = nullptr;
  c["initializer_range"] = s.initStd;
  c["tie_word_embeddings"] = s.tieWordEmbeddings;
  c["use_cache"] = true;
  c["vocab_size"] = s.vocabSize;
  c[s.configStyle == ConfigStyle::V4 ? "torch_dtype" : "dtype"] = torchDtypeName(s.storedDtype);
  c["transformers_version"] = versionFor(s.configStyle);
  return c;
}

json generationConfigJson(const CheckpointSpec& s) {
  json g = json::object();
  g["_from_model_config"] = true;
  g["bos_token_id"] = s.resolvedBosId();
  g["eos_token_id"] = s.resolvedEosId();
  g["transformers_version"] = versionFor(s.configStyle);
  if (s.configStyle == ConfigStyle::V5) {
    g["output_attentions"] = false;
    g["output_hidden_states"] = false;
    g["use_cache"] = true;
  }
  return g;
}

json tokenizerConfigJson(const CheckpointSpec& s, const std::vector<std::string>& tokens) {
  const std::string special = ByteLevelBpeBuilder::specialToken();
  json t = json::object();
  t["add_prefix_space"] = false;
  json added = json::object();
  added["content"] = special;
  added["lstrip"] = false;
  added["normalized"] = false;
  added["rstrip"] = false;
  added["single_word"] = false;
  added["special"] = true;
  t["added_tokens_decoder"] = {{std::to_string(s.specialTokenId()), added}};
  t["bos_token"] = tokenString(tokens, s.resolvedBosId());
  t["eos_token"] = tokenString(tokens, s.resolvedEosId());
  t["unk_token"] = special;
  t["clean_up_tokenization_spaces"] = false;
  t["model_max_length"] = s.maxPositions;
  t["tokenizer_class"] =
      s.architecture == Architecture::Gpt2 ? "GPT2Tokenizer" : "PreTrainedTokenizerFast";
  return t;
}

std::string dumpPretty(const json& doc) { return doc.dump(2) + "\n"; }

}  // namespace kvscope::hf

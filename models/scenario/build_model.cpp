#include "models/scenario/builders.h"

namespace memtwin {
namespace {

const char* const kArchitectureKeys[] = {"model.layers", "model.hidden", "model.heads", "model.vocab"};

}  // namespace

ModelSpec build_model(const ParamValues& v) {
  if (!v.has_section("model")) v.fail("model", "is required: a catalog name (`memtwin models`), hf_config, an architecture or parameters");
  ModelSpec m;
  m.name = v.given("model.preset") ? v.text("model.preset") : "custom";
  m.source = v.text("model.source");

  bool any_architecture = false;
  for (const char* key : kArchitectureKeys) any_architecture = any_architecture || v.given(key);

  if (v.given("model.parameters")) {
    if (any_architecture) {
      v.fail("model.parameters", "give either a parameter count or an architecture (layers, hidden, ...), not both");
    }
    m.architecture_known = false;
    m.parameters_override = v.number("model.parameters");
    return m;
  }
  if (!any_architecture) {
    v.fail("model", "needs a preset, hf_config, parameters, or an architecture (layers, hidden, heads, vocab)");
  }

  m.layers = v.int32("model.layers");
  m.hidden = v.int32("model.hidden");
  m.heads = v.int32("model.heads");
  m.vocab = v.int32("model.vocab");
  m.mlp = v.choice("model.mlp", kMlpNames);
  m.kv_heads = v.given("model.kv_heads") ? v.int32("model.kv_heads") : m.heads;
  if (m.heads % m.kv_heads != 0) {
    v.fail("model.kv_heads", std::to_string(m.kv_heads) + " key/value heads do not divide " + std::to_string(m.heads) +
                                 " query heads");
  }
  if (v.given("model.head_dim")) {
    m.head_dim = v.int32("model.head_dim");
  } else {
    if (m.hidden % m.heads != 0) {
      v.fail("model.heads", std::to_string(m.heads) + " heads do not divide hidden " + std::to_string(m.hidden) +
                                "; give model.head_dim");
    }
    m.head_dim = m.hidden / m.heads;
  }
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  if (v.given("model.intermediate")) {
    m.intermediate = v.int32("model.intermediate");
  } else if (gated) {
    v.fail("model.intermediate", "is required for a gated MLP (" + std::string(kMlpNames.name(m.mlp)) + ")");
  } else {
    m.intermediate = 4 * m.hidden;
  }
  m.tied_embeddings = v.flag("model.tied_embeddings");
  m.experts = v.int32("model.experts");
  m.experts_per_token = v.int32("model.experts_per_token");
  if (m.experts_per_token > m.experts) {
    v.fail("model.experts_per_token", std::to_string(m.experts_per_token) + " is more than the " +
                                          std::to_string(m.experts) + " experts per layer");
  }
  m.dropout = v.flag("model.dropout");
  m.norm = v.choice("model.norm", kNormNames);
  m.bias = v.choice("model.bias", kBiasNames);
  m.position = v.choice("model.position_embedding", kPositionNames);
  if (v.given("model.max_position_embeddings")) {
    m.max_position_embeddings = v.int32("model.max_position_embeddings");
  } else if (m.position == PositionEmbedding::learned) {
    v.fail("model.max_position_embeddings", "is required with learned position embeddings (they are parameters)");
  }
  return m;
}

}  // namespace memtwin

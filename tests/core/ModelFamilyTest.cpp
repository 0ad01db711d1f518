// The family files (core/src/model/families/): each family reads its config, names its
// tensors and writes its demo checkpoint, and no shared code branches on the family.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/ScratchCheckpoint.hpp"
#include "kvscope/Checkpoint.hpp"
#include "kvscope/Model.hpp"
#include "model/ModelImpl.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {
namespace {

std::string readSource(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ModelFamily, EveryFamilyIsListedOnceAndNamesItsModelType) {
  std::set<std::string> types;
  std::set<Architecture> archs;
  for (const ModelFamily* f : modelFamilies()) {
    EXPECT_TRUE(types.insert(f->modelType()).second) << f->modelType() << " listed twice";
    EXPECT_TRUE(archs.insert(f->architecture()).second) << f->modelType();
    EXPECT_EQ(familyForModelType(f->modelType()), f);
    EXPECT_EQ(&familyOf(f->architecture()), f);
    EXPECT_EQ(architectureName(f->architecture()), f->modelType());
    EXPECT_NE(supportedModelTypes().find(f->modelType()), std::string::npos);
  }
  EXPECT_EQ(familyForModelType("no_such_model_type"), nullptr);
}

// A demo checkpoint of each family loads back as that family, and every tensor it wrote is
// one the loader took (no name the family writes is left unread, none it reads is missing).
TEST(ModelFamily, EachFamilysDemoCheckpointLoadsEveryTensorItWrote) {
  for (const ModelFamily* f : modelFamilies()) {
    CheckpointSpec spec = test::smallSpec(f->architecture());
    if (f->architecture() == Architecture::Llama) spec.attentionBias = true;
    const auto dir = test::writeScratchCheckpoint("model-family", f->modelType(), spec);
    auto model = Model::load(dir);
    const ModelImpl& m = model->impl();
    EXPECT_EQ(m.config.architecture, f->architecture()) << f->modelType();
    const auto names = model->checkpoint().tensorNames();
    std::set<std::string> loaded;
    for (const auto& [name, t] : m.byName) loaded.insert(name);
    for (const auto& name : names) EXPECT_TRUE(loaded.count(name)) << f->modelType() << ": " << name;
    EXPECT_EQ(loaded.size(), names.size()) << f->modelType();
    EXPECT_EQ(f->keyProjection(1).rfind(f->weightNames().layerPrefix + "1.", 0), 0u);
    EXPECT_TRUE(model->checkpoint().contains(f->keyProjection(1))) << f->modelType();
  }
}

// Shared code composes the block from the recipe: a comparison or switch on the family
// (Architecture::...) belongs in the family's own file. Preset specs may still name one.
TEST(ModelFamily, NoFamilyBranchOutsideTheFamilyFiles) {
  namespace fs = std::filesystem;
  const fs::path root(KVSCOPE_SOURCE_DIR);
  const std::regex branch(R"((==|!=|case)\s*Architecture::)");
  int files = 0;
  for (const char* dir : {"core/src", "core/include", "app", "ui"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      ++files;
      if (rel.rfind("core/src/model/families/", 0) == 0) continue;
      const std::string text = readSource(e.path());
      EXPECT_FALSE(std::regex_search(text, branch)) << rel << " branches on the family";
    }
  EXPECT_GT(files, 100);
}

}  // namespace
}  // namespace kvscope

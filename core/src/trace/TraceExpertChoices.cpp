#include "trace/TraceExpertChoices.hpp"

#include <algorithm>
#include <cstring>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {
const char* const kExpertTensor = "experts";
constexpr int64_t kMaxSlots = 256;  // experts per token; real routers use 1 to 16

std::string rowField(size_t step) { return "steps.expert_row[" + std::to_string(step) + "]"; }
std::string stepName(size_t step) { return "trace steps[" + std::to_string(step) + "]"; }
}  // namespace

void planExpertRows(const Trace& trace, std::vector<StepLayout>& layouts) {
  int64_t rows = 0;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& s = trace.steps[i];
    layouts[i].expertRow = -1;
    if (s.experts.empty()) continue;
    const ExpertChoices& e = s.experts;
    const auto fed = static_cast<int64_t>(s.fedIds.size());
    if (e.layers != trace.model.numLayers || e.slots < 1 || e.slots > kMaxSlots ||
        static_cast<int64_t>(e.ids.size()) != fed * e.layers * e.slots)
      throw UsageError(stepName(i) + ": expert choices for " + std::to_string(e.layers) +
                       " layers x " + std::to_string(e.slots) + " slots hold " +
                       std::to_string(e.ids.size()) + " ids; " + std::to_string(fed) +
                       " fed entries x " + std::to_string(trace.model.numLayers) +
                       " model layers x 1.." + std::to_string(kMaxSlots) + " slots expected");
    for (int64_t id : e.ids)
      if (id < -1)
        throw UsageError(stepName(i) + ": expert " + std::to_string(id) +
                         " (an expert index >= 0, or -1 for none)");
    layouts[i].expertRow = rows;
    rows += fed;
  }
}

// The file's K: the most experts any step's entries took (a step with fewer is padded with -1).
static int64_t fileSlots(const Trace& trace, const std::vector<StepLayout>& layouts) {
  int64_t slots = 0;
  for (size_t i = 0; i < layouts.size(); ++i)
    if (layouts[i].expertRow >= 0) slots = std::max(slots, trace.steps[i].experts.slots);
  return slots;
}

void addExpertChoices(const Trace& trace, const std::vector<StepLayout>& layouts,
                      SafetensorsWriter& w) {
  const int64_t slots = fileSlots(trace, layouts), L = trace.model.numLayers;
  if (slots == 0) return;
  std::vector<int32_t> data;
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (layouts[i].expertRow < 0) continue;
    const ExpertChoices& e = trace.steps[i].experts;
    const size_t rows = e.ids.size() / static_cast<size_t>(e.slots);  // entries x layers
    for (size_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < slots; ++k)
        data.push_back(k < e.slots ? static_cast<int32_t>(e.ids[r * static_cast<size_t>(e.slots) + static_cast<size_t>(k)])
                                   : -1);
  }
  const auto rows = static_cast<int64_t>(data.size()) / (L * slots);
  std::vector<uint8_t> bytes(data.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), data.data(), bytes.size());
  w.addRaw(kExpertTensor, SafetensorsDtype::I32, {rows, L, slots}, std::move(bytes));
}

void applyExpertChoices(const SafetensorsFile& file, const std::vector<StepLayout>& layouts,
                        Trace& trace) {
  const bool present = file.contains(kExpertTensor);
  const int64_t L = trace.model.numLayers;
  int64_t rows = 0, slots = 0;
  if (present) {
    const auto& e = file.entry(kExpertTensor);
    if (e.dtype != SafetensorsDtype::I32 || e.shape.size() != 3 || e.shape[1] != L ||
        e.shape[2] < 1 || e.shape[2] > kMaxSlots)
      throw InputError(file.path(), kExpertTensor,
                       safetensorsDtypeName(e.dtype) + " " + shapeString(e.shape) +
                           " but an I32 [rows, " + std::to_string(L) + ", K] tensor is expected "
                           "(model.num_layers, K = 1.." + std::to_string(kMaxSlots) +
                           " experts per token)");
    rows = e.shape[0];
    slots = e.shape[2];
  }
  std::vector<int64_t> data;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const int64_t r = layouts[i].expertRow;
    if (r < 0) continue;
    if (!present)
      throw InputError(file.path(), kExpertTensor,
                       "missing, but " + rowField(i) + " names row " + std::to_string(r) +
                           " (truncated trace?)");
    TraceStep& st = trace.steps[i];
    const auto fed = static_cast<int64_t>(st.fedIds.size());
    if (r >= rows || fed > rows - r)
      throw InputError(file.path(), rowField(i),
                       "rows " + std::to_string(r) + ".." + std::to_string(r + fed - 1) +
                           " (one per fed entry) but experts has " + std::to_string(rows) +
                           " rows");
    if (data.empty()) {
      data = file.readInt64(kExpertTensor);
      for (size_t at = 0; at < data.size(); ++at)
        if (data[at] < -1)
          throw InputError(file.path(), kExpertTensor,
                           "row " + std::to_string(static_cast<int64_t>(at) / (L * slots)) +
                               " holds expert " + std::to_string(data[at]) +
                               " (an expert index >= 0, or -1 for none)");
    }
    st.experts.slots = slots;
    st.experts.layers = L;
    const auto first = data.begin() + r * L * slots;
    st.experts.ids.assign(first, first + fed * L * slots);
  }
}

}  // namespace kvscope::detail

#include "audit/RingMapCheck.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace kvscope::detail {

std::string RingMapProblem::describe() const {
  const std::string p = "position " + std::to_string(position);
  const std::string holds =
      slot >= 0 ? " (slot " + std::to_string(slot) + " holds " +
                      (slotHolds >= 0 ? "position " + std::to_string(slotHolds) : "nothing") + ")"
                : "";
  if (kind == "missing") return p + ", which the next query needs, is in no slot" + holds;
  if (kind == "duplicate") return p + " is held by two slots" + holds;
  if (kind == "foreign")
    return "slot " + std::to_string(slot) + " holds " + p + ", which the request never fed";
  if (kind == "checksum")
    return "the ring's contents differ from the records its slot map places (checksum)";
  return "the slot map holds every position the next query needs";
}

RingMapProblem checkRingMap(const std::vector<int64_t>& map, const std::vector<int64_t>& fed,
                            const std::vector<int64_t>& cacheIndexOf, int64_t window, int64_t chunk) {
  RingMapProblem out;
  const auto S = static_cast<int64_t>(map.size());
  std::map<int64_t, int64_t> held;  // position -> slots holding it
  for (int64_t p : map)
    if (p >= 0) ++held[p];
  const std::set<int64_t> everFed(fed.begin(), fed.end());
  const auto n = static_cast<int64_t>(fed.size());
  // The next query's keys: the last W - 1 entries, or on a chunked layer those of its chunk.
  out.needed = chunk > 0 ? n % chunk : std::min<int64_t>(n, std::max<int64_t>(window - 1, 1));
  auto slotOf = [&](int64_t i) { return S > 0 ? cacheIndexOf[static_cast<size_t>(i)] % S : -1; };
  for (int64_t i = n - out.needed; i < n; ++i) {
    const int64_t p = fed[static_cast<size_t>(i)];
    const auto it = held.find(p);
    const int64_t count = it == held.end() ? 0 : it->second;
    if (count == 1) continue;
    out.kind = count == 0 ? "missing" : "duplicate";
    out.position = p;
    out.slot = slotOf(i);
    out.slotHolds = out.slot >= 0 ? map[static_cast<size_t>(out.slot)] : -1;
    return out;
  }
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = map[static_cast<size_t>(s)];
    if (p < 0 || everFed.count(p)) continue;
    out.kind = "foreign";
    out.position = p;
    out.slot = s;
    out.slotHolds = p;
    return out;
  }
  return out;
}

}  // namespace kvscope::detail

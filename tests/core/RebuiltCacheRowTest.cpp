// The audit's rebuilt cache row: columns referenced in the trace's records, read back and
// hashed exactly as the engine's row ([h][t * d]) would be.
#include <gtest/gtest.h>

#include <numeric>

#include "audit/RebuiltCacheRow.hpp"
#include "kvscope/Trace.hpp"

namespace {

using kvscope::FloatTensor;
using kvscope::detail::RebuiltCacheRow;

// [h, n, d] with element values that name their place: 1000 * tag + 100 * head + 10 * column + k.
FloatTensor records(int64_t h, int64_t n, int64_t d, int tag) {
  FloatTensor t = FloatTensor::zeros({h, n, d});
  for (int64_t a = 0; a < h; ++a)
    for (int64_t c = 0; c < n; ++c)
      for (int64_t k = 0; k < d; ++k)
        t.data[static_cast<size_t>((a * n + c) * d + k)] = static_cast<float>(1000 * tag + 100 * a + 10 * c + k);
  return t;
}

// The engine's row: per head, the columns' d values in order.
std::vector<std::vector<float>> heads(const RebuiltCacheRow& row, bool keys, const std::vector<int64_t>& cols, int64_t d) {
  std::vector<std::vector<float>> out(static_cast<size_t>(row.heads()));
  for (int64_t h = 0; h < row.heads(); ++h)
    for (int64_t c : cols) {
      const float* x = keys ? row.key(h, c) : row.value(h, c);
      out[static_cast<size_t>(h)].insert(out[static_cast<size_t>(h)].end(), x, x + d);
    }
  return out;
}

TEST(RebuiltCacheRow, ColumnsReadBackInCacheOrderAndHashLikeTheEngineRow) {
  const int64_t H = 2, d = 3, dv = 2;
  const FloatTensor k1 = records(H, 4, d, 1), v1 = records(H, 4, dv, 2);  // a prefill of 4
  const FloatTensor k2 = records(H, 1, d, 3), v2 = records(H, 1, dv, 4);  // one decode step
  RebuiltCacheRow row(H, d, dv);
  row.append(k1, v1);
  row.append(k2, v2);
  ASSERT_EQ(row.size(), 5);
  EXPECT_EQ(row.key(1, 2)[0], 1000.0f + 100 + 20);  // head 1, prefill column 2
  EXPECT_EQ(row.value(1, 4)[1], 4000.0f + 100 + 1);  // head 1, the decode step's value
  std::vector<int64_t> all(5);
  std::iota(all.begin(), all.end(), int64_t{0});
  EXPECT_EQ(row.checksum(true), kvscope::traceRowChecksum(heads(row, true, all, d)));
  EXPECT_EQ(row.checksum(false), kvscope::traceRowChecksum(heads(row, false, all, dv)));
  EXPECT_NE(row.checksum(true), row.checksum(false));
  // A ring's slots in their own order.
  const std::vector<int64_t> slots{4, 1, 3};
  EXPECT_EQ(row.checksum(true, slots), kvscope::traceRowChecksum(heads(row, true, slots, d)));
  EXPECT_NE(row.checksum(true, slots), row.checksum(true));

  row.trim(2);  // a rollback of two drafts
  ASSERT_EQ(row.size(), 3);
  EXPECT_EQ(row.checksum(true), kvscope::traceRowChecksum(heads(row, true, {0, 1, 2}, d)));
  const FloatTensor snapK = records(H, 3, d, 5), snapV = records(H, 3, dv, 6);
  row.replaceWith(snapK, snapV);  // the engine's own snapshot
  ASSERT_EQ(row.size(), 3);
  EXPECT_EQ(row.key(0, 2)[2], 5000.0f + 20 + 2);
  row.trim(row.size());
  EXPECT_EQ(row.size(), 0);
  EXPECT_EQ(row.checksum(true), kvscope::traceRowChecksum(std::vector<std::vector<float>>(2)));
}

}  // namespace

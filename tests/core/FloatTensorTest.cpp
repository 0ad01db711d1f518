#include <gtest/gtest.h>

#include "kvscope/Error.hpp"
#include "kvscope/FloatTensor.hpp"

using kvscope::FloatTensor;

TEST(FloatTensor, MaxAbsDiffReportsLargestElementDifference) {
  FloatTensor a({2, 2}, {1, 2, 3, 4});
  FloatTensor b({2, 2}, {1, 2.5f, 3, 1});
  EXPECT_FLOAT_EQ(FloatTensor::maxAbsDiff(a, b), 3.0f);
  EXPECT_THROW(FloatTensor::maxAbsDiff(a, FloatTensor({4}, {1, 2, 3, 4})), std::invalid_argument);
}

TEST(FloatTensor, RejectsBufferThatDoesNotFillShape) {
  EXPECT_THROW(FloatTensor({2, 3}, {1, 2}), std::invalid_argument);
}

TEST(InputError, MessageNamesFileAndField) {
  kvscope::InputError e("/tmp/x/config.json", "num_hidden_layers", "missing");
  EXPECT_EQ(std::string(e.what()), "/tmp/x/config.json: field 'num_hidden_layers': missing");
}

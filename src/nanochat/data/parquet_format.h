#pragma once
// Constants of the Parquet format (https://github.com/apache/parquet-format, parquet.thrift) that
// nanochat's reader (parquet.cpp) and writer (parquet_writer.cpp) share. Internal to data/.
#include <cstdint>

namespace nanochat::data::parquet_format {

/// The 4 bytes at the start and at the end of every Parquet file.
inline constexpr char kMagic[4] = {'P', 'A', 'R', '1'};

// parquet-format enums used here.
enum PhysicalType : int32_t { kBoolean = 0, kInt32, kInt64, kInt96, kFloat, kDouble, kByteArray, kFixedLenByteArray };
enum Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
enum PageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };

}  // namespace nanochat::data::parquet_format

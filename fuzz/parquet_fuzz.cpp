// libFuzzer target for the Parquet reader (src/nanochat/data/parquet.cpp). Every input must either
// read completely or throw nanochat::Error; a crash, sanitizer report, hang, leak or any other
// exception is a bug. Build and run: see fuzz/README.md.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/parquet_table.h"

namespace {
std::string path() {
  static const std::string p = "/dev/shm/nanochat_parquet_fuzz_" + std::to_string(::getpid()) + ".parquet";
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path().c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  // Lower limits than the product's defaults keep single allocations within libFuzzer's budget.
  nanochat::data::ParquetLimits lim;
  lim.max_page_bytes = 16 << 20;
  lim.max_row_group_rows = 1 << 16;
  lim.max_row_group_bytes = 64 << 20;
  try {
    nanochat::data::ParquetReader r(path(), lim);
    (void)r.schema_string();
    (void)r.codec_name();
    (void)r.encodings_string();
    for (int g = 0; g < r.num_row_groups(); ++g) r.read_row_group(g);
  } catch (const nanochat::Error&) {
  }
  try {  // every column, nested ones assembled
    nanochat::data::ParquetTable t(path(), lim);
    for (const auto& c : t.column_names()) t.read_column(c);
  } catch (const nanochat::Error&) {
  }
  return 0;
}

#pragma once
// Page compression codecs of Parquet (parquet-format CompressionCodec): UNCOMPRESSED, SNAPPY
// (raw snappy block format, libsnappy), GZIP (gzip or zlib stream, zlib), ZSTD (libzstd).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanochat::data {

/// Parquet CompressionCodec enum values.
enum class Codec : int32_t {
  Uncompressed = 0,
  Snappy = 1,
  Gzip = 2,
  Lzo = 3,
  Brotli = 4,
  Lz4 = 5,
  Zstd = 6,
  Lz4Raw = 7,
};

/// Name of a codec as Parquet spells it ("ZSTD", ...), "codec(<n>)" for unknown values.
std::string codec_name(int32_t codec);

/// Decompresses `src` with `codec` into exactly `expected` bytes. The output buffer grows with the
/// bytes actually produced (a small input that declares a huge size cannot force a huge
/// allocation before it proves it). Throws nanochat::Error "<where>: ..." when the codec is not
/// supported, the data is corrupt, or the output size differs from `expected`.
std::string decompress(int32_t codec, std::string_view src, size_t expected, const std::string& where);

/// Compresses with zstd at `level` (the writer's codec). Throws nanochat::Error on failure.
std::string zstd_compress(std::string_view src, int level);

}  // namespace nanochat::data

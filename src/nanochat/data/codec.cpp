#include "nanochat/data/codec.h"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <memory>

#include "nanochat/core/error.h"

namespace nanochat::data {

std::string codec_name(int32_t codec) {
  switch (static_cast<Codec>(codec)) {
    case Codec::Uncompressed:
      return "UNCOMPRESSED";
    case Codec::Snappy:
      return "SNAPPY";
    case Codec::Gzip:
      return "GZIP";
    case Codec::Lzo:
      return "LZO";
    case Codec::Brotli:
      return "BROTLI";
    case Codec::Lz4:
      return "LZ4";
    case Codec::Zstd:
      return "ZSTD";
    case Codec::Lz4Raw:
      return "LZ4_RAW";
  }
  return str_cat("codec(", codec, ")");
}

namespace {

// First capacity for a streaming decompression: what the input could plausibly expand to,
// never more than the declared size. The buffer doubles (up to `expected`) as output arrives.
size_t initial_capacity(size_t in, size_t expected) {
  size_t guess = std::max<size_t>(64 << 10, in * 8);
  return std::min(guess, expected);
}

std::string zstd_decompress(std::string_view src, size_t expected, const std::string& where) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) fail(where, ": out of memory creating a zstd context");
  std::string out(initial_capacity(src.size(), expected), '\0');
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  size_t produced = 0;
  size_t last = 1;
  while (in.pos < in.size || last != 0) {
    if (produced == out.size()) {
      if (out.size() == expected) {
        // Output is full; the frame must end here (a probe byte tells us if it would continue).
        char probe;
        ZSTD_outBuffer ob{&probe, 1, 0};
        last = ZSTD_decompressStream(ctx.get(), &ob, &in);
        if (ZSTD_isError(last)) fail(where, ": corrupt zstd data: ", ZSTD_getErrorName(last));
        if (ob.pos != 0) fail(where, ": zstd data decompresses to more than the declared ", expected, " bytes");
        if (last == 0 && in.pos == in.size) break;
        if (in.pos == in.size) fail(where, ": zstd data is truncated");
        continue;
      }
      out.resize(std::min(expected, out.size() * 2));
    }
    ZSTD_outBuffer ob{out.data() + produced, out.size() - produced, 0};
    size_t in_before = in.pos;
    last = ZSTD_decompressStream(ctx.get(), &ob, &in);
    if (ZSTD_isError(last)) fail(where, ": corrupt zstd data: ", ZSTD_getErrorName(last));
    produced += ob.pos;
    if (ob.pos == 0 && in.pos == in_before && produced < out.size()) {
      fail(where, ": zstd data is truncated (", produced, " of ", expected, " bytes)");
    }
  }
  if (produced != expected)
    fail(where, ": zstd data decompresses to ", produced, " bytes, the page header says ", expected);
  return out;
}

std::string gzip_decompress(std::string_view src, size_t expected, const std::string& where) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) fail(where, ": cannot initialise zlib");  // gzip or zlib header
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};
  std::string out(initial_capacity(src.size(), expected), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(src.data()));
  zs.avail_in = static_cast<uInt>(std::min<size_t>(src.size(), UINT32_MAX));
  size_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() == expected) {
        char probe;
        zs.next_out = reinterpret_cast<Bytef*>(&probe);
        zs.avail_out = 1;
        int rc = inflate(&zs, Z_NO_FLUSH);
        if (rc == Z_STREAM_END && zs.avail_out == 1) break;
        if (zs.avail_out == 0) fail(where, ": gzip data decompresses to more than the declared ", expected, " bytes");
        fail(where, ": gzip data is truncated or corrupt (", zs.msg ? zs.msg : "no end of stream", ")");
      }
      out.resize(std::min(expected, out.size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    size_t avail = std::min<size_t>(out.size() - produced, UINT32_MAX);
    zs.avail_out = static_cast<uInt>(avail);
    int rc = inflate(&zs, Z_NO_FLUSH);
    produced += avail - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_OK) continue;  // progress was made
    if (rc == Z_BUF_ERROR) {
      if (zs.avail_in == 0) fail(where, ": gzip data is truncated (", produced, " of ", expected, " bytes)");
      if (zs.avail_out == 0) continue;  // output full: grow (or probe) above
    }
    fail(where, ": corrupt gzip data: ", zs.msg ? zs.msg : "inflate failed");
  }
  if (produced != expected)
    fail(where, ": gzip data decompresses to ", produced, " bytes, the page header says ", expected);
  return out;
}

std::string snappy_decompress(std::string_view src, size_t expected, const std::string& where) {
  size_t len = 0;
  if (snappy_uncompressed_length(src.data(), src.size(), &len) != SNAPPY_OK)
    fail(where, ": corrupt snappy data (bad length preamble)");
  if (len != expected) fail(where, ": snappy data decompresses to ", len, " bytes, the page header says ", expected);
  // Validation runs the decoder without output, so nothing is allocated for a lying preamble.
  if (snappy_validate_compressed_buffer(src.data(), src.size()) != SNAPPY_OK) fail(where, ": corrupt snappy data");
  std::string out(expected, '\0');
  size_t out_len = expected;
  if (snappy_uncompress(src.data(), src.size(), out.data(), &out_len) != SNAPPY_OK || out_len != expected) {
    fail(where, ": corrupt snappy data");
  }
  return out;
}

}  // namespace

std::string decompress(int32_t codec, std::string_view src, size_t expected, const std::string& where) {
  switch (static_cast<Codec>(codec)) {
    case Codec::Uncompressed:
      if (src.size() != expected)
        fail(where, ": uncompressed page has ", src.size(), " bytes, the page header says ", expected);
      return std::string(src);
    case Codec::Zstd:
      if (expected == 0 && src.empty()) return {};
      return zstd_decompress(src, expected, where);
    case Codec::Gzip:
      if (expected == 0 && src.empty()) return {};
      return gzip_decompress(src, expected, where);
    case Codec::Snappy:
      return snappy_decompress(src, expected, where);
    default:
      break;
  }
  fail(where, ": compression codec ", codec_name(codec),
       " is not supported (supported: UNCOMPRESSED, SNAPPY, GZIP, ZSTD)");
}

std::string zstd_compress(std::string_view src, int level) {
  std::string out(ZSTD_compressBound(src.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), src.data(), src.size(), level);
  if (ZSTD_isError(n)) fail("zstd compression failed: ", ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

}  // namespace nanochat::data

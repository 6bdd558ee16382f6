#include "nanochat/data/parquet_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "nanochat/core/error.h"
#include "nanochat/data/codec.h"
#include "nanochat/data/parquet_format.h"
#include "nanochat/data/thrift_compact.h"

namespace nanochat::data {

using thrift::CType;
using namespace parquet_format;

ParquetWriter::ParquetWriter(const std::string& path, int row_group_size, int zstd_level, int64_t page_bytes)
    : path_(path),
      tmp_path_(path + ".tmp"),
      row_group_size_(row_group_size),
      zstd_level_(zstd_level),
      page_bytes_(page_bytes) {
  if (row_group_size <= 0) fail("ParquetWriter: row_group_size must be positive (got ", row_group_size, ")");
  if (page_bytes <= 0) fail("ParquetWriter: page_bytes must be positive");
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(tmp_path_, ": cannot create: ", std::strerror(errno));
  append(std::string(kMagic, 4));
}

ParquetWriter::~ParquetWriter() {
  if (!closed_) {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void ParquetWriter::append(const std::string& bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(tmp_path_, ": write failed: ", std::strerror(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  offset_ += static_cast<int64_t>(bytes.size());
}

void ParquetWriter::write(std::string_view doc) {
  if (closed_) fail(path_, ": write() after close()");
  if (doc.size() > UINT32_MAX / 2)
    fail(path_, ": document of ", doc.size(), " bytes is too large for one Parquet value");
  pending_.emplace_back(doc);
  rows_++;
  if (static_cast<int>(pending_.size()) == row_group_size_) flush_row_group();
}

void ParquetWriter::flush_row_group() {
  if (pending_.empty()) return;
  RgMeta meta{static_cast<int64_t>(pending_.size()), offset_, 0, 0};
  size_t i = 0;
  while (i < pending_.size()) {
    // One data page v1: [u32 def-levels length][RLE run: all rows defined][PLAIN values].
    size_t j = i, bytes = 0;
    while (j < pending_.size() && (j == i || bytes + 4 + pending_[j].size() <= static_cast<size_t>(page_bytes_))) {
      bytes += 4 + pending_[j].size();
      ++j;
    }
    const uint32_t count = static_cast<uint32_t>(j - i);
    std::string levels;
    for (uint64_t v = static_cast<uint64_t>(count) << 1;; v >>= 7) {  // RLE run header = count << 1
      if (v < 0x80) {
        levels.push_back(static_cast<char>(v));
        break;
      }
      levels.push_back(static_cast<char>((v & 0x7f) | 0x80));
    }
    levels.push_back(1);  // definition level 1 (bit width 1 -> one byte)
    std::string raw;
    raw.reserve(4 + levels.size() + bytes);
    auto put32 = [&raw](uint32_t v) {
      for (int k = 0; k < 4; ++k) raw.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
    };
    put32(static_cast<uint32_t>(levels.size()));
    raw += levels;
    for (size_t k = i; k < j; ++k) {
      put32(static_cast<uint32_t>(pending_[k].size()));
      raw += pending_[k];
    }
    if (raw.size() > INT32_MAX) fail(path_, ": a data page would exceed 2 GiB");
    std::string comp = zstd_compress(raw, zstd_level_);
    thrift::Writer w;
    w.begin_struct();
    w.field_i32(1, 0);  // type DATA_PAGE
    w.field_i32(2, static_cast<int32_t>(raw.size()));
    w.field_i32(3, static_cast<int32_t>(comp.size()));
    // PageHeader.crc: CRC-32 of the compressed page, so a reader can tell a corrupt page.
    w.field_i32(4, static_cast<int32_t>(
                       crc32(0L, reinterpret_cast<const Bytef*>(comp.data()), static_cast<uInt>(comp.size()))));
    w.field_header(5, CType::Struct);
    w.begin_struct();
    w.field_i32(1, static_cast<int32_t>(count));
    w.field_i32(2, kPlain);
    w.field_i32(3, kRle);
    w.field_i32(4, kRle);
    w.end_struct();
    w.end_struct();
    meta.uncompressed += static_cast<int64_t>(w.bytes().size() + raw.size());
    meta.compressed += static_cast<int64_t>(w.bytes().size() + comp.size());
    append(w.bytes());
    append(comp);
    i = j;
  }
  rgs_.push_back(meta);
  pending_.clear();
}

std::string ParquetWriter::file_metadata() const {
  thrift::Writer w;
  w.begin_struct();
  w.field_i32(1, 1);  // version
  w.field_header(2, CType::List);
  w.list_header(CType::Struct, 2);
  // root
  w.begin_struct();
  w.field_i32(3, kRequired);
  w.field_binary(4, "schema");
  w.field_i32(5, 1);
  w.end_struct();
  // text: optional binary (STRING)
  w.begin_struct();
  w.field_i32(1, kByteArray);
  w.field_i32(3, kOptional);
  w.field_binary(4, "text");
  w.field_i32(6, 0);  // ConvertedType UTF8
  w.field_header(10, CType::Struct);
  w.begin_struct();
  w.field_header(1, CType::Struct);  // LogicalType.STRING = StringType {}
  w.begin_struct();
  w.end_struct();
  w.end_struct();
  w.end_struct();
  w.field_i64(3, rows_);
  w.field_header(4, CType::List);
  w.list_header(CType::Struct, static_cast<int64_t>(rgs_.size()));
  for (size_t g = 0; g < rgs_.size(); ++g) {
    const RgMeta& m = rgs_[g];
    w.begin_struct();
    w.field_header(1, CType::List);
    w.list_header(CType::Struct, 1);
    w.begin_struct();                    // ColumnChunk
    w.field_i64(2, m.data_page_offset);  // file_offset (deprecated; writers put the chunk start)
    w.field_header(3, CType::Struct);    // ColumnMetaData
    w.begin_struct();
    w.field_i32(1, kByteArray);
    w.field_header(2, CType::List);
    w.list_header(CType::I32, 2);
    w.i32(kPlain);
    w.i32(kRle);
    w.field_header(3, CType::List);
    w.list_header(CType::Binary, 1);
    w.binary("text");
    w.field_i32(4, static_cast<int32_t>(Codec::Zstd));
    w.field_i64(5, m.num_rows);
    w.field_i64(6, m.uncompressed);
    w.field_i64(7, m.compressed);
    w.field_i64(9, m.data_page_offset);
    w.end_struct();
    w.end_struct();
    w.field_i64(2, m.uncompressed);  // total_byte_size
    w.field_i64(3, m.num_rows);
    w.field_i64(5, m.data_page_offset);  // file_offset
    w.field_i64(6, m.compressed);        // total_compressed_size
    w.field_header(7, CType::I16);       // ordinal
    w.i32(static_cast<int32_t>(g));
    w.end_struct();
  }
  w.field_binary(6, "nanochat.cpp parquet writer");
  w.end_struct();
  return w.bytes();
}

void ParquetWriter::close() {
  if (closed_) return;
  flush_row_group();
  std::string tail = file_metadata();
  const uint32_t len = static_cast<uint32_t>(tail.size());
  for (int k = 0; k < 4; ++k) tail.push_back(static_cast<char>((len >> (8 * k)) & 0xff));
  tail.append(kMagic, 4);
  append(tail);
  if (::fsync(fd_) != 0) fail(tmp_path_, ": fsync failed: ", std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(tmp_path_, ": close failed: ", std::strerror(errno));
  }
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) fail(tmp_path_, ": cannot rename to ", path_, ": ", ec.message());
  closed_ = true;
}

}  // namespace nanochat::data

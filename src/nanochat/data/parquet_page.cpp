// Parquet page headers and whole-file reads (parquet_page.h).
#include "nanochat/data/parquet_page.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nanochat/data/parquet_footer.h"
#include "nanochat/data/parquet_format.h"

namespace nanochat::data::parquet_format {

using thrift::CType;

void pread_all(int fd, const std::string& path, int64_t offset, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, offset);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(path, ": byte offset ", offset, ": read failed: ", std::strerror(errno));
    }
    if (k == 0)
      fail(path, ": byte offset ", offset, ": unexpected end of file (was the file truncated while reading?)");
    p += k;
    n -= static_cast<size_t>(k);
    offset += k;
  }
}

namespace {

void parse_data_page_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.num_values = read_i32_field(r, t, "DataPageHeader.num_values");
        break;
      case 2:
        h.encoding = read_i32_field(r, t, "DataPageHeader.encoding");
        break;
      case 3:
        h.def_encoding = read_i32_field(r, t, "DataPageHeader.definition_level_encoding");
        break;
      case 4:
        h.rep_encoding = read_i32_field(r, t, "DataPageHeader.repetition_level_encoding");
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.encoding < 0) r.fail("data page header lacks num_values or encoding");
  h.has_body = true;
}

void parse_dict_page_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.num_values = read_i32_field(r, t, "DictionaryPageHeader.num_values");
        break;
      case 2:
        h.encoding = read_i32_field(r, t, "DictionaryPageHeader.encoding");
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.encoding < 0) r.fail("dictionary page header lacks num_values or encoding");
  h.has_body = true;
}

void parse_data_page_v2_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.num_values = read_i32_field(r, t, "DataPageHeaderV2.num_values");
        break;
      case 2:
        h.num_nulls = read_i32_field(r, t, "DataPageHeaderV2.num_nulls");
        break;
      case 3:
        h.num_rows = read_i32_field(r, t, "DataPageHeaderV2.num_rows");
        break;
      case 4:
        h.encoding = read_i32_field(r, t, "DataPageHeaderV2.encoding");
        break;
      case 5:
        h.def_bytes = read_i32_field(r, t, "DataPageHeaderV2.definition_levels_byte_length");
        break;
      case 6:
        h.rep_bytes = read_i32_field(r, t, "DataPageHeaderV2.repetition_levels_byte_length");
        break;
      case 7:
        expect(r, t, CType::True, "DataPageHeaderV2.is_compressed");
        h.is_compressed = r.read_bool(t);
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.num_nulls < 0 || h.encoding < 0 || h.def_bytes < 0 || h.rep_bytes < 0 ||
      h.num_nulls > h.num_values) {
    r.fail("data page v2 header has missing or negative fields");
  }
  h.has_body = true;
}

}  // namespace

PageHeader parse_page_header(thrift::Reader& r) {
  PageHeader h;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.type = read_i32_field(r, t, "PageHeader.type");
        break;
      case 2:
        h.uncompressed_size = read_i32_field(r, t, "PageHeader.uncompressed_page_size");
        break;
      case 3:
        h.compressed_size = read_i32_field(r, t, "PageHeader.compressed_page_size");
        break;
      case 4:
        h.has_crc = true;
        h.crc = static_cast<uint32_t>(read_i32_field(r, t, "PageHeader.crc"));
        break;
      case 5:
        expect(r, t, CType::Struct, "PageHeader.data_page_header");
        if (h.type == kDataPage)
          parse_data_page_header(r, h);
        else
          r.skip(t);
        break;
      case 7:
        expect(r, t, CType::Struct, "PageHeader.dictionary_page_header");
        if (h.type == kDictionaryPage)
          parse_dict_page_header(r, h);
        else
          r.skip(t);
        break;
      case 8:
        expect(r, t, CType::Struct, "PageHeader.data_page_header_v2");
        if (h.type == kDataPageV2)
          parse_data_page_v2_header(r, h);
        else
          r.skip(t);
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.type < 0 || h.uncompressed_size < 0 || h.compressed_size < 0)
    r.fail("page header lacks type or sizes (or they are negative)");
  return h;
}

}  // namespace nanochat::data::parquet_format

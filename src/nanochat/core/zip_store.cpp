#include "nanochat/core/zip_store.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <zlib.h>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"

namespace nanochat {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalHeader = 30, kCentralHeader = 46, kEndRecord = 22;

void le16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void le32(std::string& out, uint32_t v) {
  le16(out, v & 0xffff);
  le16(out, v >> 16);
}

// Bounds-checked little-endian reads from the archive bytes.
struct Cursor {
  const std::string& b;
  const std::string& path;
  uint64_t at;
  void need(uint64_t n) const {
    if (at > b.size() || n > b.size() - at)
      fail("zip archive ", path, " is truncated or corrupt: a record at byte ", at, " runs past the end of the file");
  }
  uint64_t get(int n) {
    need(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<uint64_t>(i)]);
    at += static_cast<uint64_t>(n);
    return v;
  }
  void skip(uint64_t n) {
    need(n);
    at += n;
  }
};

}  // namespace

uint32_t zip_crc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

ZipWriter::ZipWriter(const std::string& path, size_t align) : path_(path), align_(align == 0 ? 1 : align) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail("cannot create ", path, ": ", std::strerror(errno));
}

ZipWriter::~ZipWriter() {
  if (f_) std::fclose(f_);
}

void ZipWriter::put(const void* p, size_t n) {
  if (n > 0 && std::fwrite(p, 1, n, f_) != n) fail("write to ", path_, " failed: ", std::strerror(errno));
  pos_ += n;
}

void ZipWriter::add(const std::string& name, const void* data, size_t n) {
  if (!f_) fail("zip archive ", path_, " is already finished");
  // The extra field is an 'FB' block of padding that puts the data on an aligned offset.
  const uint64_t start = pos_ + kLocalHeader + name.size() + 4;
  const uint64_t pad = (align_ - start % align_) % align_;
  if (pos_ + kLocalHeader + name.size() + 4 + pad + n >= std::numeric_limits<uint32_t>::max() || name.size() > 0xffff)
    fail("cannot write ", path_, ": the archive would pass 4 GiB, which this writer does not support");
  const uint32_t crc = zip_crc32(0, data, n);
  std::string h;
  le32(h, kLocalSig);
  le16(h, 20);    // version needed
  le16(h, 0);     // flags
  le16(h, 0);     // stored
  le16(h, 0);     // time
  le16(h, 0x21);  // date: 1980-01-01
  le32(h, crc);
  le32(h, static_cast<uint32_t>(n));
  le32(h, static_cast<uint32_t>(n));
  le16(h, static_cast<uint32_t>(name.size()));
  le16(h, static_cast<uint32_t>(pad + 4));
  h += name;
  h += "FB";
  le16(h, static_cast<uint32_t>(pad));
  h.append(pad, 'Z');
  entries_.push_back({name, crc, static_cast<uint32_t>(n), static_cast<uint32_t>(pos_)});
  put(h.data(), h.size());
  put(data, n);
}

void ZipWriter::finish() {
  if (!f_) return;
  std::string cd;
  for (const Entry& e : entries_) {
    le32(cd, kCentralSig);
    le16(cd, 20);  // made by
    le16(cd, 20);  // needed
    le16(cd, 0);
    le16(cd, 0);
    le16(cd, 0);
    le16(cd, 0x21);
    le32(cd, e.crc);
    le32(cd, e.size);
    le32(cd, e.size);
    le16(cd, static_cast<uint32_t>(e.name.size()));
    le16(cd, 0);  // extra
    le16(cd, 0);  // comment
    le16(cd, 0);  // disk
    le16(cd, 0);  // internal attributes
    le32(cd, 0);  // external attributes
    le32(cd, e.offset);
    cd += e.name;
  }
  const uint64_t cd_offset = pos_;
  if (entries_.size() > 0xffff || cd_offset + cd.size() >= std::numeric_limits<uint32_t>::max())
    fail("cannot write ", path_, ": too many records or past 4 GiB");
  const size_t cd_len = cd.size();
  le32(cd, kEndSig);
  le16(cd, 0);
  le16(cd, 0);
  le16(cd, static_cast<uint32_t>(entries_.size()));
  le16(cd, static_cast<uint32_t>(entries_.size()));
  le32(cd, static_cast<uint32_t>(cd_len));
  le32(cd, static_cast<uint32_t>(cd_offset));
  le16(cd, 0);
  put(cd.data(), cd.size());
  const bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int e = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) fail("cannot flush ", path_, ": ", std::strerror(e));
}

ZipReader::ZipReader(const std::string& path) : path_(path) {
  bytes_ = read_file(path);
  parse_central_directory();
}

ZipReader ZipReader::from_bytes(std::string bytes, const std::string& what) {
  ZipReader z;
  z.path_ = what;
  z.bytes_ = std::move(bytes);
  z.parse_central_directory();
  return z;
}

void ZipReader::parse_central_directory() {
  const std::string& b = bytes_;
  if (b.size() < kEndRecord) fail(path_, " is not a zip archive (", b.size(), " bytes); it is not a torch checkpoint");
  // The end record is in the last 22 + 65535 bytes (the comment may follow it).
  uint64_t end = b.size() - kEndRecord;
  const uint64_t lowest = b.size() > kEndRecord + 0xffff ? b.size() - kEndRecord - 0xffff : 0;
  for (;; --end) {
    if (Cursor{b, path_, end}.get(4) == kEndSig) break;
    if (end == lowest) fail(path_, " is not a zip archive (no end of central directory); it is not a torch checkpoint");
  }
  Cursor e{b, path_, end + 10};
  uint64_t count = e.get(2);
  uint64_t cd_size = e.get(4);
  uint64_t cd_offset = e.get(4);
  if ((count == 0xffff || cd_offset == 0xffffffff || cd_size == 0xffffffff) && end >= 20) {
    Cursor loc{b, path_, end - 20};
    if (loc.get(4) == kZip64LocatorSig) {
      loc.skip(4);
      Cursor z{b, path_, loc.get(8)};
      if (z.get(4) != kZip64EndSig) fail("zip archive ", path_, " is corrupt: bad zip64 end record");
      z.skip(8 + 2 + 2 + 4 + 4 + 8);
      count = z.get(8);
      cd_size = z.get(8);
      cd_offset = z.get(8);
    }
  }
  Cursor c{b, path_, cd_offset};
  c.need(cd_size);
  for (uint64_t i = 0; i < count; ++i) {
    if (c.get(4) != kCentralSig) fail("zip archive ", path_, " is corrupt: bad central directory entry ", i);
    c.skip(4);
    const uint64_t flags = c.get(2), method = c.get(2);
    c.skip(4);
    const uint32_t crc = static_cast<uint32_t>(c.get(4));
    uint64_t csize = c.get(4), usize = c.get(4);
    const uint64_t name_len = c.get(2), extra_len = c.get(2), comment_len = c.get(2);
    c.skip(8);
    uint64_t local = c.get(4);
    c.need(name_len);
    const std::string name = b.substr(c.at, name_len);
    c.skip(name_len);
    Cursor x{b, path_, c.at};
    while (x.at + 4 <= c.at + extra_len) {  // zip64 extended information replaces the 0xffffffff fields
      const uint64_t id = x.get(2), len = x.get(2), next = x.at + len;
      if (id == 1) {
        if (usize == 0xffffffff) usize = x.get(8);
        if (csize == 0xffffffff) csize = x.get(8);
        if (local == 0xffffffff) local = x.get(8);
      }
      x.at = next;
    }
    c.skip(extra_len + comment_len);
    if ((flags & 1) != 0 || method != 0 || csize != usize)
      fail("zip archive ", path_, ": record '", name,
           "' is compressed or encrypted; torch checkpoints store records "
           "uncompressed, so this file was not written by torch.save");
    Cursor l{b, path_, local};
    if (l.get(4) != kLocalSig) fail("zip archive ", path_, " is corrupt: bad local header of record '", name, "'");
    l.skip(22);
    const uint64_t lname = l.get(2), lextra = l.get(2);
    l.skip(lname + lextra);
    l.need(usize);
    if (!index_.emplace(name, Rec{l.at, usize, crc}).second)
      fail("zip archive ", path_, " holds record '", name, "' twice");
    order_.push_back(name);
  }
}

std::vector<std::string> ZipReader::names() const { return order_; }

std::string_view ZipReader::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("zip archive ", path_, " has no record '", name, "'");
  std::string_view v(bytes_.data() + it->second.offset, it->second.size);
  if (zip_crc32(0, v.data(), v.size()) != it->second.crc)
    fail("zip archive ", path_, ": record '", name, "' fails its CRC32 check; the file is corrupt");
  return v;
}

}  // namespace nanochat

#include "nanochat/core/zip_extract.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/zip_store.h"

namespace nanochat {

namespace {

uint64_t le(const std::string& b, uint64_t at, int n, const std::string& path) {
  if (at + static_cast<uint64_t>(n) > b.size()) fail("zip archive ", path, " is truncated");
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<uint64_t>(i)]);
  return v;
}

std::string inflate_raw(const std::string& b, uint64_t at, uint64_t csize, uint64_t usize, const std::string& what) {
  std::string out(usize, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail("cannot start zlib for ", what);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + at));
  z.avail_in = static_cast<uInt>(csize);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(usize);
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != usize) fail(what, " does not inflate to its recorded ", usize, " bytes");
  return out;
}

bool safe_name(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos) return false;
  std::stringstream ss(name);
  for (std::string part; std::getline(ss, part, '/');)
    if (part == "..") return false;
  return true;
}

}  // namespace

std::vector<std::string> extract_zip(const std::string& zip_path, const std::string& dest_dir,
                                     const std::string& prefix) {
  const std::string b = read_file(zip_path);
  const std::string& p = zip_path;
  if (b.size() < 22) fail(p, " is not a zip archive (", b.size(), " bytes)");
  uint64_t end = b.size() - 22;
  const uint64_t lowest = b.size() > 22 + 0xffff ? b.size() - 22 - 0xffff : 0;
  while (le(b, end, 4, p) != 0x06054b50) {
    if (end == lowest) fail(p, " is not a zip archive (no end of central directory)");
    --end;
  }
  const uint64_t count = le(b, end + 10, 2, p), cd_offset = le(b, end + 16, 4, p);
  if (count == 0xffff || cd_offset == 0xffffffff) fail(p, ": zip64 archives are not supported");
  std::vector<std::string> written;
  uint64_t c = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (le(b, c, 4, p) != 0x02014b50) fail("zip archive ", p, " is corrupt: bad central directory entry ", i);
    const uint64_t flags = le(b, c + 8, 2, p), method = le(b, c + 10, 2, p);
    const uint32_t crc = static_cast<uint32_t>(le(b, c + 16, 4, p));
    const uint64_t csize = le(b, c + 20, 4, p), usize = le(b, c + 24, 4, p);
    const uint64_t name_len = le(b, c + 28, 2, p), extra_len = le(b, c + 30, 2, p), comment_len = le(b, c + 32, 2, p);
    const uint64_t local = le(b, c + 42, 4, p);
    if (c + 46 + name_len > b.size()) fail("zip archive ", p, " is truncated");
    const std::string name = b.substr(c + 46, name_len);
    c += 46 + name_len + extra_len + comment_len;
    const std::string what = "zip archive " + p + ": record '" + name + "'";
    if (name.rfind(prefix, 0) != 0 || name.back() == '/') continue;
    if (!safe_name(name)) fail(what, " has a name that leaves the target folder; refusing to unpack it");
    if (flags & 1) fail(what, " is encrypted");
    if (method != 0 && method != 8) fail(what, " uses compression method ", method, " (only stored and deflate)");
    if (le(b, local, 4, p) != 0x04034b50) fail(what, ": bad local header");
    const uint64_t data = local + 30 + le(b, local + 26, 2, p) + le(b, local + 28, 2, p);
    if (data + csize > b.size()) fail(what, " is truncated");
    std::string bytes = method == 0 ? b.substr(data, csize) : inflate_raw(b, data, csize, usize, what);
    if (bytes.size() != usize) fail(what, " holds ", bytes.size(), " bytes, not its recorded ", usize);
    if (zip_crc32(0, bytes.data(), bytes.size()) != crc) fail(what, " fails its CRC32 check (corrupt download?)");
    const std::string rel = name.substr(prefix.size());
    if (rel.empty()) continue;
    const std::filesystem::path out = std::filesystem::path(dest_dir) / rel;
    std::error_code ec;
    std::filesystem::create_directories(out.parent_path(), ec);
    if (ec) fail("cannot create ", out.parent_path().string(), ": ", ec.message());
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) fail("cannot write ", out.string());
    written.push_back(rel);
  }
  return written;
}

}  // namespace nanochat

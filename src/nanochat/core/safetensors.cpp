#include "nanochat/core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"

namespace nanochat {

size_t st_dtype_size(const std::string& d) {
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F16" || d == "BF16" || d == "I16") return 2;
  if (d == "U8" || d == "I8" || d == "BOOL") return 1;
  fail("safetensors: unknown dtype '", d, "'");
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::vector<float> StTensor::to_f32() const {
  const int64_t n = numel();
  std::vector<float> out(n);
  if (dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), n * 4);
  } else if (dtype == "F64") {
    const double* p = reinterpret_cast<const double*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else if (dtype == "I32") {
    const int32_t* p = reinterpret_cast<const int32_t*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else if (dtype == "I64") {
    const int64_t* p = reinterpret_cast<const int64_t*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else {
    fail("safetensors: cannot convert dtype ", dtype, " to float32");
  }
  return out;
}

std::vector<int64_t> StTensor::to_i64() const {
  const int64_t n = numel();
  std::vector<int64_t> out(n);
  if (dtype == "I64") {
    std::memcpy(out.data(), bytes.data(), n * 8);
  } else if (dtype == "I32") {
    const int32_t* p = reinterpret_cast<const int32_t*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else if (dtype == "U8") {
    for (int64_t i = 0; i < n; ++i) out[i] = bytes[i];
  } else {
    fail("safetensors: cannot convert dtype ", dtype, " to int64");
  }
  return out;
}

const StTensor& StFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) fail("safetensors file ", path, " has no tensor named '", name, "'");
  return it->second;
}

StFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open safetensors file ", path, ": ", std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t fsize = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  uint64_t hlen = 0;
  if (fsize < 8 || !f.read(reinterpret_cast<char*>(&hlen), 8))
    fail("safetensors file ", path, " is truncated (", fsize, " bytes, no header)");
  if (hlen > fsize - 8) fail("safetensors file ", path, " header length ", hlen, " exceeds file size ", fsize);
  std::string header(hlen, '\0');
  f.read(header.data(), static_cast<std::streamsize>(hlen));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    fail("safetensors file ", path, " has a corrupt JSON header: ", e.what());
  }
  StFile out;
  out.path = path;
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = fsize - data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m)
        out.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    StTensor t;
    try {
      t.dtype = it->at("dtype").get<std::string>();
      t.shape = it->at("shape").get<std::vector<int64_t>>();
      auto off = it->at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        fail("safetensors file ", path, ": tensor '", it.key(), "' has data offsets outside the file");
      const uint64_t expect = static_cast<uint64_t>(t.numel()) * st_dtype_size(t.dtype);
      if (off[1] - off[0] != expect)
        fail("safetensors file ", path, ": tensor '", it.key(), "' holds ", off[1] - off[0],
             " bytes but its shape and dtype need ", expect);
      t.bytes.resize(off[1] - off[0]);
      f.seekg(static_cast<std::streamoff>(data_start + off[0]));
      if (!f.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size())))
        fail("safetensors file ", path, ": could not read tensor '", it.key(), "'");
    } catch (const nlohmann::json::exception& e) {
      fail("safetensors file ", path, ": bad header entry '", it.key(), "': ", e.what());
    }
    out.tensors.emplace(it.key(), std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<StWriteEntry>& entries,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  uint64_t off = 0;
  for (auto& e : entries) {
    int64_t n = 1;
    for (auto s : e.shape) n *= s;
    uint64_t bytes = static_cast<uint64_t>(n) * st_dtype_size(e.dtype);
    j[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = j.dump();
  while ((header.size() + 8) % 8 != 0) header.push_back(' ');  // align data to 8 bytes
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write ", path, ": ", std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        ::close(fd);
        fail("write to ", path, " failed: ", std::strerror(e));
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  uint64_t hlen = header.size();
  write_all(&hlen, 8);
  write_all(header.data(), header.size());
  for (auto& e : entries) {
    int64_t n = 1;
    for (auto s : e.shape) n *= s;
    write_all(e.data, static_cast<size_t>(n) * st_dtype_size(e.dtype));
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail("fsync of ", path, " failed: ", std::strerror(e));
  }
  if (::close(fd) != 0) fail("close of ", path, " failed: ", std::strerror(errno));
}

}  // namespace nanochat

#include "nanochat/core/torch_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/pickle.h"
#include "nanochat/core/zip_store.h"

namespace nanochat {

namespace {

struct DtypeInfo {
  const char* dtype;
  const char* storage;  // torch.<storage>
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", "FloatStorage", 4}, {"BF16", "BFloat16Storage", 2}, {"I32", "IntStorage", 4}, {"I64", "LongStorage", 8}};

const DtypeInfo* by_dtype(const std::string& d) {
  for (const auto& i : kDtypes)
    if (d == i.dtype) return &i;
  return nullptr;
}
const DtypeInfo* by_storage(const std::string& global) {
  for (const auto& i : kDtypes)
    if (global == std::string("torch.") + i.storage) return &i;
  return nullptr;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Pickles one tensor as _rebuild_tensor_v2(persistent storage `key`, 0, size, stride, False, OrderedDict()).
void pickle_tensor(PickleWriter& w, const StWriteEntry& e, const std::string& key) {
  const DtypeInfo* d = by_dtype(e.dtype);
  if (!d) fail("cannot write tensor '", e.name, "' to a torch file: dtype ", e.dtype, " is not supported");
  w.global("torch._utils", "_rebuild_tensor_v2");
  w.mark();
  w.mark();
  w.str("storage");
  w.global("torch", d->storage);
  w.str(key);
  w.str("cpu");
  w.integer(numel_of(e.shape));
  w.tuple_from_mark();
  w.binpersid();
  w.integer(0);
  w.mark();
  for (int64_t s : e.shape) w.integer(s);
  w.tuple_from_mark();
  w.mark();
  int64_t stride = 1;
  std::vector<int64_t> strides(e.shape.size());
  for (size_t i = e.shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= e.shape[i];
  }
  for (int64_t s : strides) w.integer(s);
  w.tuple_from_mark();
  w.boolean(false);
  w.global("collections", "OrderedDict");
  w.empty_tuple();
  w.reduce();
  w.tuple_from_mark();
  w.reduce();
}

void write_archive(const std::string& path, const std::string& pickle, const std::vector<StWriteEntry>& entries) {
  std::string archive = std::filesystem::path(path).filename().string();
  archive = archive.substr(0, archive.find('.'));
  if (archive.empty()) archive = "archive";
  ZipWriter z(path, 64);
  z.add(archive + "/data.pkl", pickle.data(), pickle.size());
  z.add(archive + "/.format_version", "1", 1);
  z.add(archive + "/.storage_alignment", "64", 2);
  z.add(archive + "/byteorder", "little", 6);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    z.add(archive + "/data/" + std::to_string(i), e.data,
          static_cast<size_t>(numel_of(e.shape)) * by_dtype(e.dtype)->size);
  }
  z.add(archive + "/version", "3\n", 2);
  z.finish();
}

// Storage types torch writes for dtypes we do not read: accepted by the unpickler so that the
// error names the tensor and its dtype instead of an unknown global.
constexpr const char* kOtherStorages[] = {"HalfStorage",  "DoubleStorage", "ByteStorage",        "CharStorage",
                                          "ShortStorage", "BoolStorage",   "ComplexFloatStorage"};

const std::set<std::string>& allowed_globals() {
  static const std::set<std::string> g = [] {
    std::set<std::string> s{"collections.OrderedDict", "torch._utils._rebuild_tensor_v2"};
    for (const auto& i : kDtypes) s.insert(std::string("torch.") + i.storage);
    for (const char* o : kOtherStorages) s.insert(std::string("torch.") + o);
    return s;
  }();
  return g;
}

std::vector<int64_t> int_tuple(const PickleTree& t, int idx, const std::string& ctx) {
  std::vector<int64_t> out;
  for (int i : t.expect(idx, PyKind::Tuple, ctx).items) out.push_back(t.expect(i, PyKind::Int, ctx).i);
  return out;
}

// One _rebuild_tensor_v2(...) call of the pickle, with its storage's bytes from the archive.
StTensor read_tensor(const PickleTree& t, int idx, const ZipReader& z, const std::string& prefix,
                     const std::string& ctx) {
  const PyNode& call = t.expect(idx, PyKind::Call, ctx);
  if (t.at(call.callable).s != "torch._utils._rebuild_tensor_v2" || call.items.size() < 6 || call.items.size() > 7)
    fail(t.what, ": ", ctx, " is not a tensor (", t.at(call.callable).s, ")");
  const PyNode& pid = t.expect(t.expect(call.items[0], PyKind::PersId, ctx + " storage").pid, PyKind::Tuple, ctx);
  if (pid.items.size() != 5 || t.expect(pid.items[0], PyKind::Str, ctx).s != "storage")
    fail(t.what, ": ", ctx, " has a storage reference torch does not write");
  const DtypeInfo* d = by_storage(t.expect(pid.items[1], PyKind::Global, ctx + " storage type").s);
  if (!d)
    fail(t.what, ": ", ctx, " has storage type ", t.at(pid.items[1]).s,
         ", which is not supported (F32, BF16, I32, I64)");
  const std::string key = t.expect(pid.items[2], PyKind::Str, ctx + " storage key").s;
  const int64_t storage_numel = t.expect(pid.items[4], PyKind::Int, ctx + " storage size").i;
  const int64_t offset = t.expect(call.items[1], PyKind::Int, ctx + " offset").i;
  StTensor out;
  out.dtype = d->dtype;
  out.shape = int_tuple(t, call.items[2], ctx + " size");
  const std::vector<int64_t> stride = int_tuple(t, call.items[3], ctx + " stride");
  if (stride.size() != out.shape.size())
    fail(t.what, ": ", ctx, " has ", stride.size(), " strides for ", out.shape.size(), " dimensions");
  int64_t numel = 1, expect_stride = 1;
  for (size_t i = out.shape.size(); i-- > 0;) {
    const int64_t s = out.shape[i];
    if (s < 0 || (s > 0 && numel > std::numeric_limits<int32_t>::max() * int64_t{16} / s))
      fail(t.what, ": ", ctx, " has an impossible size");
    if (s > 1 && stride[i] != expect_stride)
      fail(t.what, ": ", ctx, " is not contiguous, which torch.save of a state dict never writes");
    expect_stride *= s;
    numel *= s;
  }
  const std::string_view data = z.get(prefix + "data/" + key);
  if (storage_numel < 0 || static_cast<uint64_t>(storage_numel) * d->size != data.size())
    fail(t.what, ": ", ctx, " storage ", key, " holds ", data.size(), " bytes, not ", storage_numel, " elements of ",
         d->dtype);
  if (offset < 0 || offset > storage_numel || numel > storage_numel - offset)
    fail(t.what, ": ", ctx, " runs past the end of its storage ", key);
  const auto* p = reinterpret_cast<const uint8_t*>(data.data()) + static_cast<size_t>(offset) * d->size;
  out.bytes.assign(p, p + static_cast<size_t>(numel) * d->size);
  return out;
}

struct OpenedTorch {
  ZipReader zip;
  std::string prefix;
  PickleTree tree;
};

OpenedTorch open_torch(ZipReader zip, const std::string& what) {
  std::string prefix;
  for (const auto& n : zip.names()) {
    const size_t slash = n.find('/');
    if (slash != std::string::npos && n.substr(slash + 1) == "data.pkl") {
      prefix = n.substr(0, slash + 1);
      break;
    }
  }
  if (prefix.empty()) fail(what, " has no <archive>/data.pkl record; it is not a torch checkpoint");
  if (zip.has(prefix + "byteorder") && zip.get(prefix + "byteorder") != "little")
    fail(what, " was written on a big-endian machine, which is not supported");
  PickleTree tree = parse_pickle(zip.get(prefix + "data.pkl"), what + " (" + prefix + "data.pkl)", allowed_globals());
  return OpenedTorch{std::move(zip), prefix, std::move(tree)};
}

}  // namespace

void save_torch_state_dict(const std::string& path, const std::vector<StWriteEntry>& entries) {
  PickleWriter w(2);
  w.global("collections", "OrderedDict");
  w.empty_tuple();
  w.reduce();
  w.mark();
  for (size_t i = 0; i < entries.size(); ++i) {
    w.str(entries[i].name);
    pickle_tensor(w, entries[i], std::to_string(i));
  }
  w.setitems();
  write_archive(path, w.finish(), entries);
}

void save_torch_tensor(const std::string& path, const StWriteEntry& entry) {
  PickleWriter w(2);
  pickle_tensor(w, entry, "0");
  write_archive(path, w.finish(), {entry});
}

TorchStateDict parse_torch_state_dict(std::string bytes, const std::string& what) {
  OpenedTorch o = open_torch(ZipReader::from_bytes(std::move(bytes), what), what);
  const PickleTree& t = o.tree;
  const PyNode& root = t.at(t.root);
  if (root.kind != PyKind::Dict && !(root.kind == PyKind::Call && t.at(root.callable).s == "collections.OrderedDict"))
    fail(what, " holds a ", py_kind_name(root.kind), ", not a state dict (a dict of tensors)");
  TorchStateDict out;
  std::set<std::string> seen;
  for (const auto& [k, v] : root.dict) {
    const std::string name = t.expect(k, PyKind::Str, "a state dict key").s;
    if (!seen.insert(name).second) fail(what, ": key ", name, " appears twice");
    out.emplace_back(name, read_tensor(t, v, o.zip, o.prefix, "tensor " + name));
  }
  return out;
}

TorchStateDict load_torch_state_dict(const std::string& path) { return parse_torch_state_dict(read_file(path), path); }

StTensor load_torch_tensor(const std::string& path) {
  OpenedTorch o = open_torch(ZipReader(path), path);
  return read_tensor(o.tree, o.tree.root, o.zip, o.prefix, "the tensor");
}

void TorchObjectWriter::tensor(const StWriteEntry& e) {
  pickle_tensor(w_, e, std::to_string(entries_.size()));
  entries_.push_back(e);
}

void TorchObjectWriter::save(const std::string& path) { write_archive(path, w_.finish(), entries_); }

StTensor TorchObject::tensor(int idx, const std::string& ctx) const { return read_tensor(tree, idx, zip, prefix, ctx); }

TorchObject load_torch_object(const std::string& path) {
  OpenedTorch o = open_torch(ZipReader(path), path);
  return TorchObject{std::move(o.zip), std::move(o.prefix), std::move(o.tree)};
}

std::vector<float> tensor_to_f32(const StTensor& t, const std::string& what) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (t.dtype == "F32" && t.bytes.size() == n * 4) {
    std::memcpy(out.data(), t.bytes.data(), n * 4);
  } else if (t.dtype == "BF16" && t.bytes.size() == n * 2) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits =
          (static_cast<uint32_t>(t.bytes[2 * i + 1]) << 24) | (static_cast<uint32_t>(t.bytes[2 * i]) << 16);
      std::memcpy(&out[i], &bits, 4);
    }
  } else {
    fail(what, " is ", t.dtype, "; only float32 and bfloat16 weights can be read");
  }
  return out;
}

}  // namespace nanochat

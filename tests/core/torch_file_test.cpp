// The torch zip checkpoint codec (core/torch_file.h, core/zip_store.h, core/pickle.h): files real
// PyTorch wrote are read exactly (fp32, bf16 widened, int32/int64, a view at a storage offset);
// what we write (state dicts, single tensors, nested objects like an optimizer state_dict) is read
// back by us and by Python's own zipfile + pickle; the unpickler refuses
// globals outside its allow-list; and thousands of corrupted copies of a real file only ever end
// in success or nanochat::Error (run in the ASan build too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/core/pickle.h"
#include "nanochat/core/torch_file.h"
#include "nanochat/core/zip_store.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace nanochat;

namespace {

std::string fixture(const std::string& name) { return std::string(NANOCHAT_TEST_DATA) + "/interop/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
}

// Runs the standard-library reader; returns its JSON output.
json read_with_python(const std::string& mode, const std::string& path) {
  const std::string cmd = "python3 " + std::string(NANOCHAT_SOURCE_DIR) + "/tools/interop/read_with_stdlib.py " + mode +
                          " " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) ADD_FAILURE() << cmd << " failed:\n" << out;
  return rc == 0 ? json::parse(out) : json();
}

std::vector<double> values_of(const StTensor& t) {
  std::vector<double> v;
  if (t.dtype == "F32" || t.dtype == "BF16") {
    for (float x : tensor_to_f32(t, "t")) v.push_back(x);
  } else {
    for (int64_t x : t.to_i64()) v.push_back(static_cast<double>(x));
  }
  return v;
}

}  // namespace

TEST(TorchFile, ReadsWhatRealTorchWrote) {
  const TorchStateDict sd = load_torch_state_dict(fixture("tensors.pt"));
  const json want = json::parse(slurp(fixture("tensors.json")));
  ASSERT_EQ(sd.size(), want.size());
  size_t i = 0;
  for (const auto& [key, w] : want.items()) {
    SCOPED_TRACE(key);
    EXPECT_EQ(sd[i].first, key);  // the file's order is kept
    EXPECT_EQ(sd[i].second.dtype, w["dtype"].get<std::string>());
    EXPECT_EQ(sd[i].second.shape, w["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(values_of(sd[i].second), w["values"].get<std::vector<double>>());
    ++i;
  }
}

TEST(TorchFile, RoundTripsAndPythonsPickleReadsWhatWeWrite) {
  const std::string path = tmp_path("nc_torch_rt") + ".pt";
  const std::vector<float> a{1.5f, -2.f, 3.25f, 0.f, 1e-7f, -1e30f};
  const std::vector<int32_t> b{1, -2, 2147483647};
  save_torch_state_dict(path, {{"x.weight", "F32", {2, 3}, a.data()}, {"y", "I32", {3}, b.data()}});
  const TorchStateDict sd = load_torch_state_dict(path);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "x.weight");
  EXPECT_EQ(sd[0].second.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(sd[0].second.bytes.data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(sd[1].second.dtype, "I32");
  EXPECT_EQ(std::memcmp(sd[1].second.bytes.data(), b.data(), b.size() * 4), 0);

  const json py = read_with_python("state-dict", path);
  ASSERT_TRUE(py.contains("x.weight")) << py.dump();
  EXPECT_EQ(py["x.weight"]["dtype"], "F32");
  EXPECT_EQ(py["x.weight"]["shape"], json({2, 3}));
  EXPECT_EQ(py["x.weight"]["stride"], json({3, 1}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(py["x.weight"]["values"][i].get<float>(), a[i]);
  EXPECT_EQ(py["y"]["values"], json({1, -2, 2147483647}));

  const std::string one = tmp_path("nc_torch_one") + ".pt";
  save_torch_tensor(one, {"t", "I32", {3}, b.data()});
  EXPECT_EQ(load_torch_tensor(one).to_i64(), (std::vector<int64_t>{1, -2, 2147483647}));
  EXPECT_EQ(read_with_python("tensor", one)["values"], json({1, -2, 2147483647}));
  fs::remove(path);
  fs::remove(one);
}

TEST(TorchFile, RefusesGlobalsOutsideTheAllowList) {
  // A pickle that would run os.system('true') under pickle.load.
  const std::string evil = std::string("\x80\x02") + "cposix\nsystem\n" + "X\x04\x00\x00\x00true" + "\x85R.";
  try {
    parse_pickle(evil, "evil.pkl", {"collections.OrderedDict"});
    FAIL() << "accepted posix.system";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("posix.system"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("evil.pkl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_pickle(std::string("\x80\x02\xff.", 4), "x", {}), Error);  // unknown opcode
  EXPECT_THROW(parse_pickle(std::string("\x80\x02X\xff\xff\x00\x00"
                                        "ab",
                                        9),
                            "x", {}),
               Error);  // truncated
}

namespace {

// `orig` (a torch file) with its data.pkl replaced by `pkl` of the same length, CRC32 fixed up.
std::string with_pickle(const std::string& orig, const std::string& pkl_name, const std::string& pkl) {
  const ZipReader z = ZipReader::from_bytes(orig, "orig.pt");
  const std::string old(z.get(pkl_name));
  EXPECT_EQ(old.size(), pkl.size());
  std::string b = orig;
  b.replace(orig.find(old), pkl.size(), pkl);
  size_t crc_at = std::string::npos;
  for (size_t at = orig.find("PK\x01\x02"); at != std::string::npos; at = orig.find("PK\x01\x02", at + 1))
    if (orig.compare(at + 46, pkl_name.size(), pkl_name) == 0) crc_at = at + 16;
  EXPECT_NE(crc_at, std::string::npos);
  if (crc_at == std::string::npos) return b;
  const uint32_t crc = zip_crc32(0, pkl.data(), pkl.size());
  for (int k = 0; k < 4; ++k) b[crc_at + k] = static_cast<char>((crc >> (8 * k)) & 0xff);
  return b;
}

}  // namespace

TEST(TorchFile, NamesTheFileAndKeyOfAnUnsupportedDtype) {
  // The fp32 tensor's storage turned into int16 (ShortStorage has FloatStorage's length).
  const std::string orig = slurp(fixture("tensors.pt"));
  std::string pkl(ZipReader::from_bytes(orig, "t").get("tensors/data.pkl"));
  pkl.replace(pkl.find("FloatStorage"), 12, "ShortStorage");
  try {
    parse_torch_state_dict(with_pickle(orig, "tensors/data.pkl", pkl), "tensors.pt");
    FAIL() << "accepted int16";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensors.pt"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor a.f32"), std::string::npos) << m;
    EXPECT_NE(m.find("ShortStorage"), std::string::npos) << m;
  }
  // and a flipped byte in a tensor's data fails its record's CRC32, naming the file
  std::string bad = orig;
  const float minus_one = -1.f;  // a.f32's first value
  const size_t at = bad.find(std::string(reinterpret_cast<const char*>(&minus_one), 4));
  ASSERT_NE(at, std::string::npos);
  bad[at] = static_cast<char>(bad[at] ^ 1);
  try {
    parse_torch_state_dict(bad, "tensors.pt");
    FAIL() << "accepted a corrupt record";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensors.pt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC32"), std::string::npos) << e.what();
  }
}

// Random byte flips and truncations of a real torch file: success or nanochat::Error, never a
// crash, a hang or another exception (ASan/UBSan check the memory accesses in that build).
TEST(TorchFile, SurvivesCorruptedFiles) {
  const std::string orig = slurp(fixture("tensors.pt"));
  ASSERT_GT(orig.size(), 1000u);
  std::mt19937_64 rng(1234);
  int errors = 0, ok = 0;
  for (int it = 0; it < 4000; ++it) {
    std::string b = orig;
    const int mode = static_cast<int>(rng() % 3);
    if (mode == 0 || mode == 2) {  // flip 1-8 bytes; half the time inside data.pkl (first records)
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; ++k) {
        const size_t pos = (rng() % 2) ? rng() % std::min<size_t>(b.size(), 400) : rng() % b.size();
        b[pos] = static_cast<char>(rng() & 0xff);
      }
    }
    if (mode >= 1) b.resize(rng() % b.size());
    try {
      parse_torch_state_dict(std::move(b), "fuzz.pt");
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 1000);  // corruption is noticed (CRC32, structure)
  // Flips inside data.pkl with its CRC32 fixed up, so the unpickler and the tensor checks behind
  // it see the damage; plus truncated pickles given to the unpickler alone.
  const ZipReader z = ZipReader::from_bytes(orig, "tensors.pt");
  const std::string pkl(z.get("tensors/data.pkl"));
  const std::set<std::string> allowed{"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                      "torch.FloatStorage",      "torch.BFloat16Storage",
                                      "torch.IntStorage",        "torch.LongStorage"};
  for (int it = 0; it < 4000; ++it) {
    std::string p = pkl;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) p[rng() % p.size()] = static_cast<char>(rng() & 0xff);
    try {
      parse_torch_state_dict(with_pickle(orig, "tensors/data.pkl", p), "fuzz.pt");
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
    try {
      parse_pickle(std::string_view(p).substr(0, rng() % p.size()), "fuzz.pkl", allowed);
    } catch (const Error&) {
    }
  }
  SUCCEED() << ok << " corrupted copies still read, " << errors << " refused";
}

TEST(TorchFile, ANestedObjectWithFloatsListsAndTensorsReadsBackHereAndInPython) {
  // the shape of an optimizer state_dict: {"state": {0: {"step": 7, "exp_avg": T}},
  // "param_groups": [{"kind": "adamw", "betas": (0.8, 0.96), "eps": 1e-10, "params": [0]}]}
  const float v[3] = {1.5f, -2.25f, 3.0f};
  const std::string path = tmp_path("nested") + ".pt";
  TorchObjectWriter tw;
  PickleWriter& w = tw.pickle();
  w.empty_dict();
  w.mark();
  w.str("state");
  w.empty_dict();
  w.mark();
  w.integer(0);
  w.empty_dict();
  w.mark();
  w.str("step");
  w.integer(7);
  w.str("exp_avg");
  tw.tensor({"m", "F32", {3}, v});
  w.setitems();
  w.setitems();
  w.str("param_groups");
  w.empty_list();
  w.mark();
  w.empty_dict();
  w.mark();
  w.str("kind");
  w.str("adamw");
  w.str("betas");
  w.mark();
  w.floating(0.8);
  w.floating(0.96);
  w.tuple_from_mark();
  w.str("eps");
  w.floating(1e-10);
  w.str("params");
  w.empty_list();
  w.mark();
  w.integer(0);
  w.appends();
  w.setitems();
  w.appends();
  w.setitems();
  tw.save(path);

  const TorchObject o = load_torch_object(path);
  const PickleTree& t = o.tree;
  const int group = t.at(t.dict_get(t.root, "param_groups")).items.at(0);
  EXPECT_EQ(t.at(t.at(t.dict_get(group, "betas")).items.at(1)).f, 0.96);
  EXPECT_EQ(t.at(t.dict_get(group, "eps")).f, 1e-10);
  const auto& entry = t.at(t.dict_get(t.root, "state")).dict.at(0);
  EXPECT_EQ(t.at(entry.first).i, 0);
  const StTensor m = o.tensor(t.dict_get(entry.second, "exp_avg"), "exp_avg");
  EXPECT_EQ(tensor_to_f32(m, "m"), std::vector<float>(v, v + 3));

  const json py = read_with_python("optimizer", path);
  EXPECT_EQ(py["param_groups"][0]["betas"], json::array({0.8, 0.96}));
  EXPECT_EQ(py["param_groups"][0]["eps"], 1e-10);
  EXPECT_EQ(py["state"]["0"]["step"], 7);
  EXPECT_EQ(py["state"]["0"]["exp_avg"]["values"], json::array({1.5, -2.25, 3.0}));
  fs::remove(path);
}

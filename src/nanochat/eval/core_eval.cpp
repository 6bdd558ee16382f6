#include "nanochat/eval/core_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/py_random.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat {

namespace {

// Python's str.isspace() code points.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point starting at s[i] and its byte length (an invalid byte is itself, length 1).
uint32_t decode_at(const std::string& s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  len = 1;
  if (c < 0x80) return c;
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFFFFFF;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0xFFFFFFFF;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  len = n;
  return cp;
}

// Index of the first code point of the trailing whitespace run of s.
size_t trailing_space_start(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    size_t len = 0;
    const uint32_t cp = decode_at(s, start, len);
    if (start + len != end || !py_space(cp)) break;
    end = start;
  }
  return end;
}

// Token ids of `text` after <|bos|> (nanochat tokenizer(prompts, prepend=bos)).
std::vector<int32_t> with_bos(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids{tok.bos_id()};
  const std::vector<int32_t> t = tok.encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

// nanochat find_common_length: the common prefix (left) or suffix (right) length of the sequences.
size_t common_length(const std::vector<std::vector<int32_t>>& seqs, bool left) {
  size_t min_len = seqs[0].size();
  for (const auto& s : seqs) min_len = std::min(min_len, s.size());
  for (size_t i = 0; i < min_len; ++i) {
    const auto at = [&](const std::vector<int32_t>& s) { return left ? s[i] : s[s.size() - 1 - i]; };
    const int32_t t = at(seqs[0]);
    for (const auto& s : seqs)
      if (at(s) != t) return i;
  }
  return min_len;
}

// Logits (T, V) of one row.
std::vector<float> row_logits(GPT& model, const std::vector<int32_t>& ids, const CoreTask& task) {
  const int64_t limit = model.config().sequence_len * 10;
  if (static_cast<int64_t>(ids.size()) > limit)
    fail("CORE task ", task.label, ": a prompt of ", ids.size(), " tokens is longer than the model's rotary table (",
         limit, " = 10 x sequence_len); nanochat cannot evaluate it either");
  const int64_t V = model.config().vocab_size;
  std::vector<float> logits(ids.size() * static_cast<size_t>(V));
  model.forward_logits(ids.data(), 1, static_cast<int>(ids.size()), logits.data());
  return logits;
}

// Mean cross-entropy (nats) of the tokens ids[si..ei) predicted at positions si-1..ei-2.
double mean_answer_loss(GPT& model, const std::vector<int32_t>& ids, size_t si, size_t ei, const CoreTask& task) {
  if (si == 0 || ei <= si) return std::numeric_limits<double>::quiet_NaN();  // torch: mean of nothing is nan
  const std::vector<float> logits = row_logits(model, ids, task);
  const size_t V = static_cast<size_t>(model.config().vocab_size);
  double sum = 0;
  for (size_t t = si - 1; t + 1 < ei; ++t) {
    const float* l = logits.data() + t * V;
    const float mx = *std::max_element(l, l + V);
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    sum += static_cast<float>(std::log(z) + mx - l[ids[t + 1]]);
  }
  return sum / static_cast<double>(ei - si);
}

}  // namespace

std::string py_strip(const std::string& s) {
  size_t a = 0;
  while (a < s.size()) {
    size_t len = 0;
    if (!py_space(decode_at(s, a, len))) break;
    a += len;
  }
  const std::string rest = s.substr(a);
  return rest.substr(0, trailing_space_start(rest));
}

std::vector<std::string> render_core_prompts(const CoreTask& task, const CoreItem& item,
                                             const std::vector<const CoreItem*>& fewshot) {
  const std::string& d = task.delimiter;
  std::string shots;
  std::vector<std::string> out;
  switch (task.type) {
    case CoreTaskType::MultipleChoice:
      for (const CoreItem* f : fewshot) shots += f->query + d + f->choices[static_cast<size_t>(f->gold)] + "\n\n";
      for (const std::string& c : item.choices) out.push_back(shots + item.query + d + c);
      break;
    case CoreTaskType::Schema:
      for (const CoreItem* f : fewshot)
        shots += f->context_options[static_cast<size_t>(f->gold)] + d + f->continuation + "\n\n";
      for (const std::string& o : item.context_options) out.push_back(shots + o + d + item.continuation);
      break;
    case CoreTaskType::LanguageModeling: {
      for (const CoreItem* f : fewshot) shots += py_strip(f->context) + d + f->continuation + "\n\n";
      const std::string prompt = shots + py_strip(item.context) + d;
      out.push_back(py_strip(prompt));
      out.push_back(prompt + item.continuation);
      break;
    }
  }
  return out;
}

std::vector<CoreItem> core_task_examples(std::vector<CoreItem> items, int64_t max_per_task) {
  PyRandom rng(1337);
  rng.shuffle(items);
  if (max_per_task > 0 && static_cast<int64_t>(items.size()) > max_per_task)
    items.resize(static_cast<size_t>(max_per_task));
  return items;
}

std::vector<size_t> core_fewshot_indices(const CoreTask& task, size_t n_examples, size_t idx) {
  const size_t k = static_cast<size_t>(task.num_fewshot);
  if (k == 0) return {};
  if (n_examples < k + 1)
    fail("CORE task ", task.label, " asks for ", k, " few-shot examples but has only ", n_examples,
         " examples (raise --max-per-task)");
  PyRandom rng(1234 + idx);
  std::vector<size_t> picks = rng.sample_indices(n_examples - 1, k);  // into [i for i in range(n) if i != idx]
  for (size_t& p : picks)
    if (p >= idx) ++p;
  return picks;
}

bool evaluate_core_example(GPT& model, const Tokenizer& tok, const CoreTask& task, const std::vector<CoreItem>& data,
                           size_t idx) {
  const CoreItem& item = data[idx];
  std::vector<const CoreItem*> fewshot;
  for (size_t i : core_fewshot_indices(task, data.size(), idx)) fewshot.push_back(&data[i]);
  const std::vector<std::string> prompts = render_core_prompts(task, item, fewshot);
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) ids.push_back(with_bos(tok, p));

  if (task.type == CoreTaskType::LanguageModeling) {
    const std::vector<int32_t>& without = ids[0];
    const std::vector<int32_t>& with = ids[1];
    const size_t si = without.size(), ei = with.size();
    if (si >= ei || !std::equal(without.begin(), without.end(), with.begin()))
      fail("CORE task ", task.label, ", example ", idx, ": the context's tokens are not a prefix of the tokens ",
           "with the continuation (nanochat stops on this too)");
    const std::vector<float> logits = row_logits(model, with, task);
    const size_t V = static_cast<size_t>(model.config().vocab_size);
    for (size_t t = si - 1; t + 1 < ei; ++t) {
      const float* l = logits.data() + t * V;
      if (static_cast<int32_t>(std::max_element(l, l + V) - l) != with[t + 1]) return false;
    }
    return true;
  }
  std::vector<size_t> starts(ids.size()), ends(ids.size());
  if (task.type == CoreTaskType::MultipleChoice) {
    const size_t prefix = common_length(ids, true);
    for (size_t i = 0; i < ids.size(); ++i) starts[i] = prefix, ends[i] = ids[i].size();
  } else {
    const size_t suffix = common_length(ids, false);
    for (size_t i = 0; i < ids.size(); ++i) ends[i] = ids[i].size(), starts[i] = ends[i] - suffix;
  }
  // the option with the lowest mean loss (the first of equals; nan never wins, like Python's min
  // over floats whose first element is not nan)
  size_t best = 0;
  double best_loss = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const double loss = mean_answer_loss(model, ids[i], starts[i], ends[i], task);
    if (i == 0 || loss < best_loss) best = i, best_loss = loss;
  }
  return static_cast<int>(best) == item.gold;
}

CoreResult evaluate_core(GPT& model, const Tokenizer& tok, const CoreBundle& bundle, int64_t max_per_task,
                         const std::function<void(const CoreTaskResult&)>& on_task, const CoreRanks& ranks) {
  NC_CHECK(ranks.world >= 1 && ranks.rank >= 0 && ranks.rank < ranks.world, "bad CORE ranks");
  CoreResult r;
  double centered_sum = 0;
  for (const CoreTask& task : bundle.tasks) {
    Timer timer;
    const std::vector<CoreItem> data = core_task_examples(read_core_task_data(bundle, task), max_per_task);
    if (data.empty()) fail(bundle.dir, "/eval_data/", task.dataset_uri, " holds no examples (task ", task.label, ")");
    CoreTaskResult tr;
    tr.label = task.label;
    tr.type = task.type;
    tr.num_fewshot = task.num_fewshot;
    // nanochat evaluate_task: example i on rank i % world, then the 0/1 results summed over ranks
    std::vector<double> ok(data.size(), 0.0);
    for (size_t i = static_cast<size_t>(ranks.rank); i < data.size(); i += static_cast<size_t>(ranks.world))
      ok[i] = evaluate_core_example(model, tok, task, data, i) ? 1.0 : 0.0;
    if (ranks.world > 1) ranks.sum(ok.data(), ok.size());
    size_t correct = 0;
    for (double v : ok) {
      tr.correct.push_back(v > 0.5 ? 1 : 0);
      correct += v > 0.5 ? 1 : 0;
    }
    // nanochat: the mean of a float32 tensor of 0/1 (.item() of a float32: e.g. 0.1f, not 0.1)
    tr.accuracy = static_cast<double>(static_cast<float>(correct) / static_cast<float>(data.size()));
    const double b = 0.01 * bundle.random_baseline.at(task.label);
    tr.centered = (tr.accuracy - b) / (1.0 - b);
    tr.seconds = timer.seconds();
    centered_sum += tr.centered;
    r.tasks.push_back(tr);
    if (on_task) on_task(r.tasks.back());
  }
  r.core_metric = centered_sum / static_cast<double>(r.tasks.size());
  return r;
}

void write_core_csv(const std::string& path, const CoreResult& r, bool complete) {
  std::string text;
  char line[256];
  std::snprintf(line, sizeof line, "%-35s, %-10s, %-10s\n", "Task", "Accuracy", "Centered");
  text += line;
  for (const CoreTaskResult& t : r.tasks) {
    std::snprintf(line, sizeof line, "%-35s, %-10.6f, %-10.6f\n", t.label.c_str(), t.accuracy, t.centered);
    text += line;
  }
  if (complete) {
    std::snprintf(line, sizeof line, "%-35s, %-10s, %-10.6f\n", "CORE", "", r.core_metric);
    text += line;
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) fail("cannot create the folder of ", path, ": ", ec.message());
  write_file_atomic(path, text);
}

}  // namespace nanochat

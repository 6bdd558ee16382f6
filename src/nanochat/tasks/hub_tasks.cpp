// nanochat's hub tasks (hub_tasks.h).
#include "nanochat/tasks/hub_tasks.h"

#include <memory>
#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/core/np_random.h"
#include "nanochat/tasks/execution.h"

namespace nanochat::tasks {

namespace {

using Role = Message::Role;

// A task over a hub table, its rows in nanochat's order (HubDataset.shuffle(42)).
class HubTask : public Task {
 public:
  HubTask(std::string name, EvalType type, const std::string& dir, const std::vector<std::string>& columns,
          const std::string& download)
      : name_(std::move(name)), type_(type), table_(dir, columns, download) {
    perm_ = NpRandom(42).permutation(table_.num_rows());
  }
  std::string name() const override { return name_; }
  EvalType eval_type() const override { return type_; }
  int64_t size() const override { return table_.num_rows(); }
  Example get(int64_t index) const override {
    if (index < 0 || index >= size())
      fail("task ", name_, ": example ", index, " is out of range (the task has ", size(), " examples)");
    return row(perm_[static_cast<size_t>(index)]);
  }

 protected:
  virtual Example row(int64_t r) const = 0;
  std::string str(const char* col, int64_t r) const { return cell_string(table_, col, r); }
  std::vector<std::string> strs(const char* col, int64_t r) const { return cell_strings(table_, col, r); }
  const HubTable& table() const { return table_; }

 private:
  std::string name_;
  EvalType type_;
  HubTable table_;
  std::vector<int64_t> perm_;
};

Example two_turns(std::string user, std::vector<ContentPart> assistant) {
  Example ex;
  ex.conversation.messages.push_back(Message::plain(Role::User, std::move(user)));
  Message a;
  a.role = Role::Assistant;
  a.parts = std::move(assistant);
  ex.conversation.messages.push_back(std::move(a));
  return ex;
}

std::vector<ContentPart> text_part(std::string s) { return {ContentPart{ContentPart::Kind::Text, std::move(s)}}; }

// The letter answer of a categorical example: the assistant's reference text.
bool letter_matches(const Example& ex, const std::string& completion) {
  if (ex.conversation.messages.empty()) return false;
  bool known = false;
  for (const auto& l : ex.letters) known |= l == completion;
  return known && ex.conversation.messages.back().text() == completion;
}

class SmolTalk final : public HubTask {
 public:
  SmolTalk(const std::string& dir, const std::string& dl)
      : HubTask("SmolTalk", EvalType::Generative, dir, {"messages.content", "messages.role"}, dl) {}
  bool evaluate(const Example&, const std::string&) const override {
    fail("task SmolTalk has no answers to judge (it is for training only)");
  }

 private:
  Example row(int64_t r) const override {
    const auto content = strs("messages.content", r), roles = strs("messages.role", r);
    const std::string where = table().where(r);
    if (content.size() != roles.size())
      fail(where, ": messages have ", content.size(), " contents but ", roles.size(), " roles");
    if (content.empty()) fail(where, ": a conversation without messages");
    Example ex;
    const size_t first = roles[0] == "system" ? 1 : 0;
    if (content.size() - first < 2)
      fail(where, ": needs a user and an assistant message after the optional system one");
    for (size_t i = 0; i < content.size(); ++i) {
      const char* expected = i < first ? "system" : ((i - first) % 2 == 0 ? "user" : "assistant");
      if (roles[i] != expected)
        fail(where, ": message ", i - first, " has role \"", roles[i], "\" but should be \"", expected, "\"");
      ex.conversation.messages.push_back(Message::plain(parse_role(roles[i]), content[i]));
    }
    return ex;
  }
};

const std::vector<std::string> kAbcd = {"A", "B", "C", "D"};

class Mmlu final : public HubTask {
 public:
  Mmlu(const std::string& dir, const std::string& dl)
      : HubTask("MMLU", EvalType::Categorical, dir, {"question", "choices", "answer", "subject"}, dl) {}
  bool evaluate(const Example& ex, const std::string& c) const override { return letter_matches(ex, c); }

 private:
  Example row(int64_t r) const override {
    const auto choices = strs("choices", r);
    if (choices.size() != 4) fail(table().where(r), ": MMLU has 4 choices, this row has ", choices.size());
    const int64_t answer = cell_int(table(), "answer", r);
    if (answer < 0 || answer > 3) fail(table().where(r), ": answer ", answer, " is not 0..3");
    Example ex =
        two_turns(render_mc(str("question", r), kAbcd, choices), text_part(kAbcd[static_cast<size_t>(answer)]));
    ex.letters = kAbcd;
    ex.extra = {{"subject", str("subject", r)}};
    return ex;
  }
};

class Arc final : public HubTask {
 public:
  Arc(const std::string& name, const std::string& dir, const std::string& dl)
      : HubTask(name, EvalType::Categorical, dir, {"question", "choices.text", "choices.label", "answerKey"}, dl) {}
  bool evaluate(const Example& ex, const std::string& c) const override { return letter_matches(ex, c); }

 private:
  Example row(int64_t r) const override {
    const auto choices = strs("choices.text", r), letters = strs("choices.label", r);
    const std::string key = str("answerKey", r);
    bool known = false;
    for (const auto& l : letters) known |= l == key;
    if (!known) fail(table().where(r), ": answerKey \"", key, "\" is not one of the choices' labels");
    if (letters.size() != choices.size())
      fail(table().where(r), ": ", choices.size(), " choices but ", letters.size(), " labels");
    Example ex = two_turns(render_mc(str("question", r), letters, choices), text_part(key));
    ex.letters = letters;
    return ex;
  }
};

class Gsm8k final : public HubTask {
 public:
  Gsm8k(const std::string& dir, const std::string& dl)
      : HubTask("GSM8K", EvalType::Generative, dir, {"question", "answer"}, dl) {}
  bool evaluate(const Example& ex, const std::string& c) const override {
    if (ex.conversation.messages.empty() || ex.conversation.messages.back().parts.empty()) return false;
    const auto ref = gsm8k_extract_answer(ex.conversation.messages.back().parts.back().text);
    return ref == gsm8k_extract_answer(c);
  }

 private:
  Example row(int64_t r) const override { return two_turns(str("question", r), gsm8k_parts(str("answer", r))); }
};

class HumanEval final : public HubTask {
 public:
  HumanEval(const std::string& dir, const std::string& dl)
      : HubTask("HumanEval", EvalType::Generative, dir, {"prompt", "canonical_solution", "entry_point", "test"}, dl) {}
  bool evaluate(const Example& ex, const std::string& c) const override {
    if (ex.conversation.messages.empty() || !ex.extra.is_object()) return false;
    const std::string program = humaneval_check_program(ex.conversation.messages.front().text(), c,
                                                        ex.extra.value("test", ""), ex.extra.value("entry_point", ""));
    return execute_python(program).success;
  }

 private:
  Example row(int64_t r) const override {
    const std::string prompt = str("prompt", r);
    Example ex = two_turns(prompt, text_part(prompt + "\n" + str("canonical_solution", r)));
    ex.extra = {{"entry_point", str("entry_point", r)}, {"test", str("test", r)}};
    return ex;
  }
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || (c >= 0x1c && c <= 0x1f);
}

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

}  // namespace

TaskPtr make_smoltalk(const std::string& dir, const std::string& dl) { return std::make_shared<SmolTalk>(dir, dl); }
TaskPtr make_mmlu(const std::string& dir, const std::string& dl) { return std::make_shared<Mmlu>(dir, dl); }
TaskPtr make_gsm8k(const std::string& dir, const std::string& dl) { return std::make_shared<Gsm8k>(dir, dl); }
TaskPtr make_arc(const std::string& name, const std::string& dir, const std::string& dl) {
  return std::make_shared<Arc>(name, dir, dl);
}
TaskPtr make_humaneval(const std::string& dir, const std::string& dl) { return std::make_shared<HumanEval>(dir, dl); }

std::vector<ContentPart> gsm8k_parts(const std::string& answer) {
  std::vector<ContentPart> parts;
  size_t text_from = 0, i = 0;
  while (i + 1 < answer.size()) {
    // "<<" + one or more non-'>' + ">>", leftmost first
    if (answer.compare(i, 2, "<<") == 0) {
      const size_t close = answer.find('>', i + 2);
      if (close != std::string::npos && close > i + 2 && close + 1 < answer.size() && answer[close + 1] == '>') {
        parts.push_back({ContentPart::Kind::Text, answer.substr(text_from, i - text_from)});
        const std::string inner = answer.substr(i + 2, close - i - 2);
        const size_t eq = inner.rfind('=');
        parts.push_back({ContentPart::Kind::Python, eq == std::string::npos ? inner : inner.substr(0, eq)});
        parts.push_back({ContentPart::Kind::PythonOutput, eq == std::string::npos ? "" : inner.substr(eq + 1)});
        i = text_from = close + 2;
        continue;
      }
    }
    ++i;
  }
  parts.push_back({ContentPart::Kind::Text, answer.substr(text_from)});
  return parts;
}

std::optional<std::string> gsm8k_extract_answer(const std::string& text) {
  auto num = [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == ','; };
  for (size_t p = text.find("#### "); p != std::string::npos; p = text.find("#### ", p + 1)) {
    size_t q = p + 5;
    if (q < text.size() && text[q] == '-' && q + 1 < text.size() && num(text[q + 1])) ++q;
    size_t e = q;
    while (e < text.size() && num(text[e])) ++e;
    if (e == q) continue;
    std::string out = text.substr(p + 5, e - p - 5);
    std::erase(out, ',');
    return out;
  }
  return std::nullopt;
}

std::string humaneval_imports(const std::string& prompt) {
  std::string out;
  size_t b = 0;
  while (b <= prompt.size()) {
    size_t e = prompt.find('\n', b);
    if (e == std::string::npos) e = prompt.size();
    const std::string line = strip(prompt.substr(b, e - b));
    if (starts_with(line, "import ") || starts_with(line, "from ")) {
      out += (out.empty() ? "" : "\n") + line;
    } else if (!line.empty() && line[0] != '#') {
      break;
    }
    b = e + 1;
  }
  return out;
}

std::string humaneval_program(const std::string& completion) {
  const std::string& s = completion;
  for (size_t p = s.find("```"); p != std::string::npos; p = s.find("```", p + 1)) {
    // (?:python)? is tried first with "python", then without.
    for (int with_python = 1; with_python >= 0; --with_python) {
      size_t q = p + 3;
      if (with_python) {
        if (s.compare(q, 6, "python") != 0) continue;
        q += 6;
      }
      size_t w = q;  // \s* greedy, then backtrack to a '\n' after which "\n```" follows
      while (w < s.size() && is_space(s[w])) ++w;
      for (size_t k = w; k-- > q;) {
        if (s[k] != '\n') continue;
        const size_t end = s.find("\n```", k + 1);
        if (end != std::string::npos) return strip(s.substr(k + 1, end - k - 1));
      }
    }
  }
  return strip(s);
}

std::string humaneval_check_program(const std::string& prompt, const std::string& completion, const std::string& test,
                                    const std::string& entry_point) {
  return humaneval_imports(prompt) + "\n\n" + humaneval_program(completion) + "\n\n" + test + "\n" + "check(" +
         entry_point + ")";
}

}  // namespace nanochat::tasks

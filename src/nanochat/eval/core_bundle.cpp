#include "nanochat/eval/core_bundle.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"

namespace nanochat {

const char* const kEvalBundleDownloadHint =
    "fetch it with `nanochat data download --eval-bundle` (nanochat's "
    "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip, unpacked into $NANOCHAT_BASE_DIR/eval_bundle)";

const char* core_task_type_name(CoreTaskType t) {
  switch (t) {
    case CoreTaskType::MultipleChoice:
      return "multiple_choice";
    case CoreTaskType::Schema:
      return "schema";
    case CoreTaskType::LanguageModeling:
      return "language_modeling";
  }
  return "?";
}

namespace {

std::string read_bundle_file(const std::string& path) {
  if (!std::filesystem::exists(path))
    fail(path, " is missing: the CORE metric needs the eval bundle; ", kEvalBundleDownloadHint);
  return read_file(path);
}

// ---- YAML subset ----

struct YLine {
  int indent;
  std::string text;  // without indentation and comment
  int number;        // 1-based
};

// Drops a comment: '#' at the start or after a space, outside quotes.
std::string strip_comment(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      if (i == 0 || s[i - 1] == ' ' || s[i - 1] == '[' || s[i - 1] == ',' || s[i - 1] == ':' || s[i - 1] == '-')
        quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0;
  while (a < s.size() && (s[a] == ' ' || s[a] == '\t')) ++a;
  return rtrim(s.substr(a));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class YamlParser {
 public:
  YamlParser(const std::string& text, std::string name) : name_(std::move(name)) {
    std::istringstream in(text);
    std::string raw;
    int n = 0;
    while (std::getline(in, raw)) {
      ++n;
      if (raw.find('\t') != std::string::npos && raw.find_first_not_of(" \t") != std::string::npos &&
          raw.find('\t') < raw.find_first_not_of(" \t"))
        fail(name_, ":", n, ": a tab in the indentation (YAML indents with spaces)");
      const std::string t = rtrim(strip_comment(raw));
      const size_t first = t.find_first_not_of(' ');
      if (first == std::string::npos) continue;
      if (t.compare(first, 3, "---") == 0 && lines_.empty()) continue;  // document start
      lines_.push_back({static_cast<int>(first), t.substr(first), n});
    }
  }

  nlohmann::json parse() {
    if (lines_.empty()) return nlohmann::json::object();
    nlohmann::json v = block(lines_[0].indent);
    if (pos_ < lines_.size()) err(lines_[pos_], "unexpected indentation");
    return v;
  }

 private:
  [[noreturn]] void err(const YLine& l, const std::string& what) const { fail(name_, ":", l.number, ": ", what); }

  static bool is_dash(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  // Position of the ':' that ends a mapping key (followed by a space or the end), outside quotes.
  static size_t key_colon(const std::string& t) {
    if (t.empty() || t[0] == '"' || t[0] == '\'' || t[0] == '[' || t[0] == '{') return std::string::npos;
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] == ':' && (i + 1 == t.size() || t[i + 1] == ' ')) return i;
    return std::string::npos;
  }

  nlohmann::json block(int indent) {
    if (is_dash(lines_[pos_].text)) return sequence(indent);
    return mapping(indent);
  }

  nlohmann::json sequence(int indent) {
    nlohmann::json out = nlohmann::json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && is_dash(lines_[pos_].text)) {
      YLine& l = lines_[pos_];
      const std::string rest = l.text.size() > 1 ? l.text.substr(1) : "";
      const size_t off = rest.find_first_not_of(' ');
      if (off == std::string::npos) {  // "-" alone: the item is the block below
        ++pos_;
        if (pos_ >= lines_.size() || lines_[pos_].indent <= indent) {
          out.push_back(nullptr);
          continue;
        }
        out.push_back(block(lines_[pos_].indent));
      } else if (key_colon(rest.substr(off)) != std::string::npos || is_dash(rest.substr(off))) {
        // "- key: value" starts a mapping (or "- - x" a list) indented where its text starts
        l.indent = indent + 1 + static_cast<int>(off);
        l.text = rest.substr(off);
        out.push_back(block(l.indent));
      } else {
        out.push_back(scalar(rest.substr(off), l));
        ++pos_;
      }
    }
    return out;
  }

  nlohmann::json mapping(int indent) {
    nlohmann::json out = nlohmann::json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !is_dash(lines_[pos_].text)) {
      const YLine& l = lines_[pos_];
      const size_t c = key_colon(l.text);
      if (c == std::string::npos) err(l, "expected 'key: value', got '" + l.text + "'");
      const std::string key = unquote_key(trim(l.text.substr(0, c)), l);
      const std::string value = trim(l.text.substr(c + 1));
      ++pos_;
      if (out.contains(key)) err(l, "the key '" + key + "' appears twice");
      if (!value.empty()) {
        out[key] = scalar(value, l);
      } else if (pos_ < lines_.size() &&
                 (lines_[pos_].indent > indent || (lines_[pos_].indent == indent && is_dash(lines_[pos_].text)))) {
        out[key] = block(lines_[pos_].indent);
      } else {
        out[key] = nullptr;
      }
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) err(lines_[pos_], "unexpected indentation");
    return out;
  }

  std::string unquote_key(const std::string& k, const YLine& l) {
    if (!k.empty() && (k[0] == '"' || k[0] == '\'')) {
      size_t end = 0;
      std::string s = quoted(k, 0, end, l);
      if (end != k.size()) err(l, "text after a quoted key");
      return s;
    }
    return k;
  }

  // The quoted scalar starting at t[at]; `end` receives the position after the closing quote.
  std::string quoted(const std::string& t, size_t at, size_t& end, const YLine& l) {
    const char q = t[at];
    std::string out;
    size_t i = at + 1;
    for (; i < t.size(); ++i) {
      const char c = t[i];
      if (q == '\'') {
        if (c == '\'') {
          if (i + 1 < t.size() && t[i + 1] == '\'') {
            out += '\'';
            ++i;
            continue;
          }
          end = i + 1;
          return out;
        }
        out += c;
        continue;
      }
      if (c == '"') {
        end = i + 1;
        return out;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i >= t.size()) break;
      switch (t[i]) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case ' ':
          out += ' ';
          break;
        case '"':
          out += '"';
          break;
        case '/':
          out += '/';
          break;
        case '\\':
          out += '\\';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = t[i] == 'x' ? 2 : t[i] == 'u' ? 4 : 8;
          if (i + n >= t.size()) err(l, "a short \\" + std::string(1, t[i]) + " escape");
          const std::string hex = t.substr(i + 1, n);
          char* e = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &e, 16);
          if (hex.size() != n || *e != '\0') err(l, "a bad \\" + std::string(1, t[i]) + " escape");
          append_utf8(out, static_cast<uint32_t>(cp));
          i += n;
          break;
        }
        default:
          err(l, std::string("an escape YAML does not define: \\") + t[i]);
      }
    }
    err(l, "an unterminated quoted string");
  }

  nlohmann::json plain(const std::string& s) {
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    if (s == "null" || s == "~" || s == "Null" || s == "NULL") return nullptr;
    if (!s.empty() && s.find_first_not_of("+-0123456789") == std::string::npos &&
        s.find_first_of("0123456789") != std::string::npos) {
      char* e = nullptr;
      const long long v = std::strtoll(s.c_str(), &e, 10);
      if (*e == '\0') return v;
    }
    if (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+' || s[0] == '.')) {
      char* e = nullptr;
      const double v = std::strtod(s.c_str(), &e);
      if (*e == '\0') return v;
    }
    return s;
  }

  nlohmann::json scalar(const std::string& t, const YLine& l) {
    if (t[0] == '"' || t[0] == '\'') {
      size_t end = 0;
      std::string s = quoted(t, 0, end, l);
      if (!trim(t.substr(end)).empty()) err(l, "text after a quoted string");
      return s;
    }
    if (t[0] == '[') return flow_list(t, l);
    if (t[0] == '{' || t[0] == '&' || t[0] == '*' || t[0] == '!' || t[0] == '|' || t[0] == '>')
      err(l, "'" + t + "': this YAML construct is not supported (core.yaml uses plain, quoted and [list] values)");
    return plain(t);
  }

  nlohmann::json flow_list(const std::string& t, const YLine& l) {
    nlohmann::json out = nlohmann::json::array();
    size_t i = 1;
    for (;;) {
      while (i < t.size() && t[i] == ' ') ++i;
      if (i >= t.size()) err(l, "an unterminated [list]");
      if (t[i] == ']') break;
      if (t[i] == '"' || t[i] == '\'') {
        size_t end = 0;
        out.push_back(quoted(t, i, end, l));
        i = end;
      } else {
        const size_t e = t.find_first_of(",]", i);
        if (e == std::string::npos) err(l, "an unterminated [list]");
        if (t[i] == '[' || t[i] == '{') err(l, "nested flow collections are not supported");
        out.push_back(plain(trim(t.substr(i, e - i))));
        i = e;
      }
      while (i < t.size() && t[i] == ' ') ++i;
      if (i < t.size() && t[i] == ',') {
        ++i;
        continue;
      }
      if (i < t.size() && t[i] == ']') break;
      err(l, "expected ',' or ']' in a [list]");
    }
    if (!trim(t.substr(i + 1)).empty()) err(l, "text after a [list]");
    return out;
  }

  std::string name_;
  std::vector<YLine> lines_;
  size_t pos_ = 0;
};

CoreTaskType task_type_of(const std::string& s, const std::string& where) {
  if (s == "multiple_choice") return CoreTaskType::MultipleChoice;
  if (s == "schema") return CoreTaskType::Schema;
  if (s == "language_modeling") return CoreTaskType::LanguageModeling;
  fail(where, ": icl_task_type '", s, "' is not one CORE evaluates (multiple_choice, schema, language_modeling)");
}

std::vector<CoreTask> tasks_of_yaml(const nlohmann::json& y, const std::string& path) {
  if (!y.is_object() || !y.contains("icl_tasks") || !y["icl_tasks"].is_array())
    fail(path, " has no 'icl_tasks:' list; this is not the eval bundle's core.yaml");
  std::vector<CoreTask> tasks;
  for (size_t i = 0; i < y["icl_tasks"].size(); ++i) {
    const nlohmann::json& t = y["icl_tasks"][i];
    const std::string where = path + ": icl_tasks[" + std::to_string(i) + "]";
    auto str = [&](const char* k) -> std::string {
      if (!t.is_object() || !t.contains(k) || !t[k].is_string()) fail(where, " has no text '", k, "'");
      return t[k].get<std::string>();
    };
    CoreTask task;
    task.label = str("label");
    task.dataset_uri = str("dataset_uri");
    task.type = task_type_of(str("icl_task_type"), where);
    const nlohmann::json& k = t.contains("num_fewshot") ? t["num_fewshot"] : nlohmann::json();
    if (!k.is_array() || k.empty() || !k[0].is_number_integer() || k[0].get<int64_t>() < 0)
      fail(where, " (", task.label, "): num_fewshot must be a list like [5]");
    task.num_fewshot = static_cast<int>(k[0].get<int64_t>());
    if (t.contains("continuation_delimiter")) {
      if (!t["continuation_delimiter"].is_string())
        fail(where, " (", task.label, "): continuation_delimiter is not text");
      task.delimiter = t["continuation_delimiter"].get<std::string>();
    }
    tasks.push_back(task);
  }
  return tasks;
}

std::map<std::string, double> baselines_of_csv(const std::string& text, const std::string& path) {
  const auto rows = parse_csv(text);
  if (rows.empty()) fail(path, " is empty; it needs a header row with 'Eval Task' and 'Random baseline'");
  int task_col = -1, base_col = -1;
  for (size_t c = 0; c < rows[0].size(); ++c) {
    if (rows[0][c] == "Eval Task") task_col = static_cast<int>(c);
    if (rows[0][c] == "Random baseline") base_col = static_cast<int>(c);
  }
  if (task_col < 0 || base_col < 0) fail(path, ": the header row lacks an 'Eval Task' or 'Random baseline' column");
  std::map<std::string, double> out;
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (row.size() == 1 && row[0].empty()) continue;  // a blank line
    if (row.size() <= static_cast<size_t>(std::max(task_col, base_col)))
      fail(path, ": row ", r + 1, " has ", row.size(), " fields, fewer than the header's columns");
    const std::string v = trim(row[static_cast<size_t>(base_col)]);
    char* e = nullptr;
    const double b = std::strtod(v.c_str(), &e);
    if (v.empty() || *e != '\0') fail(path, ": row ", r + 1, ": Random baseline '", v, "' is not a number");
    out[row[static_cast<size_t>(task_col)]] = b;
  }
  return out;
}

std::string text_field(const nlohmann::json& j, const char* k, const std::string& where) {
  if (!j.contains(k) || !j[k].is_string()) fail(where, ": the example has no text '", k, "'");
  return j[k].get<std::string>();
}

std::vector<std::string> text_list(const nlohmann::json& j, const char* k, const std::string& where) {
  if (!j.contains(k) || !j[k].is_array() || j[k].empty()) fail(where, ": the example has no list '", k, "'");
  std::vector<std::string> out;
  for (const auto& v : j[k]) {
    if (!v.is_string()) fail(where, ": '", k, "' holds a value that is not text");
    out.push_back(v.get<std::string>());
  }
  return out;
}

int gold_of(const nlohmann::json& j, size_t options, const std::string& where) {
  if (!j.contains("gold") || !j["gold"].is_number_integer()) fail(where, ": the example has no integer 'gold'");
  const int64_t g = j["gold"].get<int64_t>();
  if (g < 0 || static_cast<size_t>(g) >= options) fail(where, ": gold ", g, " is outside the ", options, " options");
  return static_cast<int>(g);
}

}  // namespace

nlohmann::json parse_yaml_subset(const std::string& text, const std::string& name) {
  return YamlParser(text, name).parse();
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
      continue;
    }
    any = true;
    if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(field);
      field.clear();
      rows.push_back(row);
      row.clear();
      any = false;
    } else {
      field += c;
    }
  }
  if (any || !field.empty() || !row.empty()) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

CoreBundle read_core_bundle(const std::string& dir) {
  CoreBundle b;
  b.dir = dir;
  if (!std::filesystem::is_directory(dir))
    fail(dir, " is missing: the CORE metric needs the eval bundle; ", kEvalBundleDownloadHint);
  const std::string yaml_path = dir + "/core.yaml", csv_path = dir + "/eval_meta_data.csv";
  b.tasks = tasks_of_yaml(parse_yaml_subset(read_bundle_file(yaml_path), yaml_path), yaml_path);
  if (b.tasks.empty()) fail(yaml_path, " lists no icl_tasks");
  b.random_baseline = baselines_of_csv(read_bundle_file(csv_path), csv_path);
  for (const CoreTask& t : b.tasks)
    if (!b.random_baseline.count(t.label))
      fail(csv_path, " has no 'Random baseline' for the task ", t.label, " of ", yaml_path);
  return b;
}

std::vector<CoreItem> read_core_task_data(const CoreBundle& bundle, const CoreTask& task) {
  const std::string path = bundle.dir + "/eval_data/" + task.dataset_uri;
  std::istringstream in(read_bundle_file(path));
  std::vector<CoreItem> items;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = path + ":" + std::to_string(n);
    if (trim(line).empty()) {
      if (in.peek() == EOF) break;  // a final blank line
      fail(where, ": a blank line (one JSON object per line is expected)");
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(where, ": not a JSON object: ", e.what());
    }
    if (!j.is_object()) fail(where, ": not a JSON object");
    CoreItem it;
    switch (task.type) {
      case CoreTaskType::MultipleChoice:
        it.query = text_field(j, "query", where);
        it.choices = text_list(j, "choices", where);
        it.gold = gold_of(j, it.choices.size(), where);
        break;
      case CoreTaskType::Schema:
        it.context_options = text_list(j, "context_options", where);
        it.continuation = text_field(j, "continuation", where);
        it.gold = gold_of(j, it.context_options.size(), where);
        break;
      case CoreTaskType::LanguageModeling:
        it.context = text_field(j, "context", where);
        it.continuation = text_field(j, "continuation", where);
        break;
    }
    items.push_back(std::move(it));
  }
  return items;
}

}  // namespace nanochat

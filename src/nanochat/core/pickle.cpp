#include "nanochat/core/pickle.h"

#include <cstring>
#include <unordered_map>

#include "nanochat/core/error.h"

namespace nanochat {

const char* py_kind_name(PyKind k) {
  switch (k) {
    case PyKind::None:
      return "None";
    case PyKind::Bool:
      return "bool";
    case PyKind::Int:
      return "int";
    case PyKind::Float:
      return "float";
    case PyKind::Str:
      return "str";
    case PyKind::Bytes:
      return "bytes";
    case PyKind::Tuple:
      return "tuple";
    case PyKind::List:
      return "list";
    case PyKind::Dict:
      return "dict";
    case PyKind::Set:
      return "set";
    case PyKind::Global:
      return "global";
    case PyKind::Call:
      return "object";
    case PyKind::PersId:
      return "persistent id";
  }
  return "?";
}

const PyNode& PickleTree::expect(int idx, PyKind kind, const std::string& context) const {
  if (idx < 0 || static_cast<size_t>(idx) >= nodes.size()) fail(what, ": ", context, " is missing");
  const PyNode& n = nodes[static_cast<size_t>(idx)];
  if (n.kind != kind)
    fail(what, ": ", context, " is a ", py_kind_name(n.kind), " where a ", py_kind_name(kind), " was expected");
  return n;
}

int PickleTree::dict_get(int dict_idx, const std::string& key) const {
  for (const auto& [k, v] : at(dict_idx).dict)
    if (at(k).kind == PyKind::Str && at(k).s == key) return v;
  return -1;
}

namespace {

class Parser {
 public:
  Parser(std::string_view d, const std::string& what, const std::set<std::string>& allowed) : d_(d), allowed_(allowed) {
    t_.what = what;
  }

  PickleTree run() {
    for (;;) {
      op_at_ = pos_;
      const uint8_t op = u8();
      if (op == '.') {
        t_.root = pop();
        return std::move(t_);
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void bad(const std::string& why) const { fail(t_.what, ": ", why, " (pickle byte ", op_at_, ")"); }

  void need(uint64_t n) const {
    if (n > d_.size() - pos_) fail(t_.what, ": the pickle is truncated (needs ", n, " more bytes at byte ", pos_, ")");
  }
  uint64_t le(int n) {
    need(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(d_[pos_ + static_cast<size_t>(i)]);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  std::string take(uint64_t n) {
    need(n);
    std::string s(d_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string line() {
    const size_t e = d_.find('\n', pos_);
    if (e == std::string_view::npos) fail(t_.what, ": the pickle is truncated inside a GLOBAL at byte ", pos_);
    std::string s(d_.substr(pos_, e - pos_));
    pos_ = e + 1;
    return s;
  }

  int add(PyNode n) {
    t_.nodes.push_back(std::move(n));
    return static_cast<int>(t_.nodes.size() - 1);
  }
  PyNode& node(int i) { return t_.nodes[static_cast<size_t>(i)]; }
  void push(int i) { stack_.push_back(i); }
  int push_new(PyKind k) {
    PyNode n;
    n.kind = k;
    const int i = add(std::move(n));
    push(i);
    return i;
  }
  int pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) bad("stack underflow");
    const int v = stack_.back();
    stack_.pop_back();
    return v;
  }
  int top() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) bad("stack underflow");
    return stack_.back();
  }
  std::vector<int> pop_mark() {
    if (marks_.empty()) bad("no MARK on the stack");
    std::vector<int> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void push_scalar(PyKind k, int64_t i) {
    const int n = push_new(k);
    node(n).i = i;
  }
  void push_text(PyKind k, std::string s) {
    const int n = push_new(k);
    node(n).s = std::move(s);
  }
  void push_tuple(std::vector<int> items) {
    const int n = push_new(PyKind::Tuple);
    node(n).items = std::move(items);
  }
  void push_global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    if (!allowed_.count(full)) bad("it refers to " + full + ", which a checkpoint or tokenizer file never needs");
    push_text(PyKind::Global, full);
  }
  void memo_put(uint64_t key) { memo_[key] = top(); }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) bad("it reads a memo entry that was never written");
    push(it->second);
  }

  void set_items(std::vector<int> kv) {
    if (kv.size() % 2 != 0) bad("SETITEMS with an odd number of items");
    PyNode& target = node(top());
    if (target.kind != PyKind::Dict && target.kind != PyKind::Call) bad("SETITEM on a non-dict");
    for (size_t i = 0; i < kv.size(); i += 2) target.dict.emplace_back(kv[i], kv[i + 1]);
  }
  void add_items(std::vector<int> items, PyKind want, const char* op) {
    PyNode& target = node(top());
    if (target.kind != want) bad(std::string(op) + " on a " + py_kind_name(target.kind));
    target.items.insert(target.items.end(), items.begin(), items.end());
  }
  void call(bool is_newobj) {
    const int args = pop(), callable = pop();
    if (node(callable).kind != PyKind::Global) bad("REDUCE/NEWOBJ of something that is not an allowed global");
    if (node(args).kind != PyKind::Tuple) bad("REDUCE/NEWOBJ with arguments that are not a tuple");
    PyNode n;
    n.kind = PyKind::Call;
    n.callable = callable;
    n.items = node(args).items;
    n.i = is_newobj ? 1 : 0;
    push(add(std::move(n)));
  }
  void build() {
    const int state = pop();
    PyNode& obj = node(top());
    if (obj.kind != PyKind::Call) bad("BUILD on a " + std::string(py_kind_name(obj.kind)));
    obj.state = state;
  }
  void persid() {
    PyNode n;
    n.kind = PyKind::PersId;
    n.pid = pop();
    push(add(std::move(n)));
  }

  void step(uint8_t op);

  std::string_view d_;
  const std::set<std::string>& allowed_;
  PickleTree t_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, int> memo_;
};

void Parser::step(uint8_t op) {
  switch (op) {
    case 0x80:
      if (const uint8_t p = u8(); p < 2 || p > 5) bad("unsupported pickle protocol " + std::to_string(p));
      break;
    case 0x95:
      le(8);
      break;  // FRAME: only a read-ahead hint
    case '(':
      marks_.push_back(stack_.size());
      break;
    case '0':
      pop();
      break;
    case '1':
      pop_mark();
      break;
    case '2':
      push(top());
      break;
    case 'N':
      push_new(PyKind::None);
      break;
    case 0x88:
      push_scalar(PyKind::Bool, 1);
      break;
    case 0x89:
      push_scalar(PyKind::Bool, 0);
      break;
    case 'J':
      push_scalar(PyKind::Int, static_cast<int32_t>(static_cast<uint32_t>(le(4))));
      break;
    case 'K':
      push_scalar(PyKind::Int, static_cast<int64_t>(le(1)));
      break;
    case 'M':
      push_scalar(PyKind::Int, static_cast<int64_t>(le(2)));
      break;
    case 0x8a: {  // LONG1: little-endian two's complement of n bytes
      const uint8_t n = u8();
      if (n > 8) bad("an integer wider than 64 bits");
      uint64_t v = n ? le(n) : 0;
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);
      push_scalar(PyKind::Int, static_cast<int64_t>(v));
      break;
    }
    case 'G': {
      uint64_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = (bits << 8) | u8();  // big-endian
      const int n = push_new(PyKind::Float);
      std::memcpy(&node(n).f, &bits, sizeof bits);
      break;
    }
    case 'X':
      push_text(PyKind::Str, take(le(4)));
      break;
    case 0x8c:
      push_text(PyKind::Str, take(le(1)));
      break;
    case 0x8d:
      push_text(PyKind::Str, take(le(8)));
      break;
    case 'B':
      push_text(PyKind::Bytes, take(le(4)));
      break;
    case 'C':
      push_text(PyKind::Bytes, take(le(1)));
      break;
    case 0x8e:
      push_text(PyKind::Bytes, take(le(8)));
      break;
    case ')':
      push_tuple({});
      break;
    case 't':
      push_tuple(pop_mark());
      break;
    case 0x85: {
      const int a = pop();
      push_tuple({a});
      break;
    }
    case 0x86: {
      const int b = pop(), a = pop();
      push_tuple({a, b});
      break;
    }
    case 0x87: {
      const int c = pop(), b = pop(), a = pop();
      push_tuple({a, b, c});
      break;
    }
    case ']':
      push_new(PyKind::List);
      break;
    case 'a': {
      const int v = pop();
      add_items({v}, PyKind::List, "APPEND");
      break;
    }
    case 'e':
      add_items(pop_mark(), PyKind::List, "APPENDS");
      break;
    case '}':
      push_new(PyKind::Dict);
      break;
    case 's': {
      const int v = pop(), k = pop();
      set_items({k, v});
      break;
    }
    case 'u':
      set_items(pop_mark());
      break;
    case 0x8f:
      push_new(PyKind::Set);
      break;
    case 0x90:
      add_items(pop_mark(), PyKind::Set, "ADDITEMS");
      break;
    case 0x91: {
      auto items = pop_mark();
      const int n = push_new(PyKind::Set);
      node(n).items = std::move(items);
      break;
    }
    case 'c': {
      std::string m = line();
      push_global(m, line());
      break;
    }
    case 0x93: {
      const int name = pop(), module = pop();
      if (node(name).kind != PyKind::Str || node(module).kind != PyKind::Str) bad("STACK_GLOBAL of non-strings");
      push_global(node(module).s, node(name).s);
      break;
    }
    case 'R':
      call(false);
      break;
    case 0x81:
      call(true);
      break;
    case 'b':
      build();
      break;
    case 'Q':
      persid();
      break;
    case 'q':
      memo_put(le(1));
      break;
    case 'r':
      memo_put(le(4));
      break;
    case 0x94:
      memo_put(memo_.size());
      break;
    case 'h':
      memo_get(le(1));
      break;
    case 'j':
      memo_get(le(4));
      break;
    default:
      bad("unsupported pickle opcode 0x" + [op] {
        static const char* hex = "0123456789abcdef";
        return std::string{hex[op >> 4], hex[op & 15]};
      }());
  }
}

}  // namespace

PickleTree parse_pickle(std::string_view data, const std::string& what, const std::set<std::string>& allowed) {
  return Parser(data, what, allowed).run();
}

// ---- writer ----

PickleWriter::PickleWriter(int protocol) {
  out_.push_back(static_cast<char>(0x80));
  out_.push_back(static_cast<char>(protocol));
}
void PickleWriter::mark() { out_.push_back('('); }
void PickleWriter::none() { out_.push_back('N'); }
void PickleWriter::boolean(bool v) { out_.push_back(static_cast<char>(v ? 0x88 : 0x89)); }
void PickleWriter::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    out_.push_back('K');
    out_.push_back(static_cast<char>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back('J');
    for (int k = 0; k < 4; ++k) out_.push_back(static_cast<char>((static_cast<uint32_t>(v) >> (8 * k)) & 0xff));
  } else {
    out_.push_back(static_cast<char>(0x8a));
    out_.push_back(8);
    for (int k = 0; k < 8; ++k) out_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
  }
}
namespace {
void len32(std::string& out, size_t n) {
  if (n > UINT32_MAX) fail("a pickled string of ", n, " bytes is too long");
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
}
}  // namespace
void PickleWriter::str(std::string_view s) {
  out_.push_back('X');
  len32(out_, s.size());
  out_.append(s);
}
void PickleWriter::bytes(std::string_view b) {
  out_.push_back('B');
  len32(out_, b.size());
  out_.append(b);
}
void PickleWriter::global(const std::string& module, const std::string& name) {
  out_.push_back('c');
  out_ += module + "\n" + name + "\n";
}
void PickleWriter::empty_tuple() { out_.push_back(')'); }
void PickleWriter::tuple_from_mark() { out_.push_back('t'); }
void PickleWriter::floating(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  out_.push_back('G');
  for (int k = 7; k >= 0; --k) out_.push_back(static_cast<char>((bits >> (8 * k)) & 0xff));  // big-endian
}
void PickleWriter::empty_list() { out_.push_back(']'); }
void PickleWriter::appends() { out_.push_back('e'); }
void PickleWriter::empty_dict() { out_.push_back('}'); }
void PickleWriter::setitems() { out_.push_back('u'); }
void PickleWriter::reduce() { out_.push_back('R'); }
void PickleWriter::newobj() { out_.push_back(static_cast<char>(0x81)); }
void PickleWriter::build() { out_.push_back('b'); }
void PickleWriter::binpersid() { out_.push_back('Q'); }
std::string PickleWriter::finish() {
  out_.push_back('.');
  return std::move(out_);
}

}  // namespace nanochat

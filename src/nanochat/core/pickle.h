#pragma once
// A restricted reader and a small writer of Python pickles (protocols 2 to 5), enough for the
// files torch.save and pickle.dump(tiktoken.Encoding) produce.
//
// The reader never executes anything: GLOBAL / STACK_GLOBAL may only name entries of an allow-list
// given by the caller, REDUCE / NEWOBJ / BUILD / BINPERSID only record what would be called (a
// PyKind::Call or PyKind::PersId node), and the caller interprets the tree. Every opcode outside
// the set below, a truncated or malformed stream, or a stack or memo misuse is a nanochat::Error
// naming `what` (the file and record) and the byte offset. The tree is flat (nodes refer to each
// other by index), so a hostile pickle can make it cyclic: readers of a tree must bound how deep
// they follow it.
// Opcodes read: PROTO FRAME STOP MARK POP POP_MARK DUP NONE NEWTRUE NEWFALSE BININT BININT1 BININT2
// LONG1 BINFLOAT BINUNICODE SHORT_BINUNICODE BINUNICODE8 BINBYTES SHORT_BINBYTES BINBYTES8
// EMPTY_TUPLE TUPLE TUPLE1-3 EMPTY_LIST APPEND APPENDS EMPTY_DICT SETITEM SETITEMS EMPTY_SET
// ADDITEMS FROZENSET GLOBAL STACK_GLOBAL REDUCE NEWOBJ BUILD BINPERSID BINPUT LONG_BINPUT MEMOIZE
// BINGET LONG_BINGET. (Python's pickle module documents each: Lib/pickletools.py.)
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanochat {

enum class PyKind { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Set, Global, Call, PersId };

/// One node of a parsed pickle. Nodes refer to each other by index into PickleTree::nodes, so a
/// memo reference shared by several containers is one node.
struct PyNode {
  PyKind kind = PyKind::None;
  int64_t i = 0;                          ///< Int, Bool
  double f = 0;                           ///< Float
  std::string s;                          ///< Str, Bytes; Global: "module.name"
  std::vector<int> items;                 ///< Tuple, List, Set; Call: the argument tuple's items
  std::vector<std::pair<int, int>> dict;  ///< Dict entries in insertion order
  int callable = -1;                      ///< Call: the Global node called (REDUCE) or instantiated (NEWOBJ)
  int state = -1;                         ///< Call: what BUILD set, or -1
  int pid = -1;                           ///< PersId: the persistent id object
};

/// A parsed pickle: `root` is what STOP returned.
struct PickleTree {
  std::vector<PyNode> nodes;
  int root = -1;
  std::string what;  ///< the file/record it came from (for error messages)

  const PyNode& at(int idx) const { return nodes.at(static_cast<size_t>(idx)); }
  /// The node at idx, which must be of `kind`; throws nanochat::Error naming `what` and `context`.
  const PyNode& expect(int idx, PyKind kind, const std::string& context) const;
  /// Dict lookup by a Str key; -1 when absent (the node must be a Dict).
  int dict_get(int dict_idx, const std::string& key) const;
};

/// Parses `data` (what is the file and record, for messages). `allowed_globals` lists the
/// "module.name" pairs GLOBAL may name; anything else is an error naming it.
PickleTree parse_pickle(std::string_view data, const std::string& what, const std::set<std::string>& allowed_globals);

/// Kind names for messages ("int", "dict", ...).
const char* py_kind_name(PyKind k);

/// Emits pickle opcodes (protocol 2 opcodes, plus BINBYTES of protocol 3 for bytes objects).
class PickleWriter {
 public:
  explicit PickleWriter(int protocol = 2);
  void mark();
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void floating(double v);  ///< BINFLOAT (a Python float)
  void str(std::string_view s);
  void bytes(std::string_view b);
  void global(const std::string& module, const std::string& name);
  void empty_tuple();
  void tuple_from_mark();  ///< TUPLE: the items since the last mark()
  void empty_list();
  void appends();  ///< APPENDS: the items since the last mark() onto the list below the mark
  void empty_dict();
  void setitems();   ///< SETITEMS: the key/value pairs since the last mark()
  void reduce();     ///< REDUCE: callable, args tuple -> result
  void newobj();     ///< NEWOBJ: class, args tuple -> instance
  void build();      ///< BUILD: object, state -> object
  void binpersid();  ///< BINPERSID: pid object -> persistent reference
  /// STOP, and returns the whole pickle.
  std::string finish();

 private:
  std::string out_;
};

}  // namespace nanochat

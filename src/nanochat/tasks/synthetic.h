#pragma once
// Tasks made on the machine, for a chat model trained and evaluated without network: spelling and
// letter counting over a word list (Debian's wamerican, /usr/share/dict/words), small arithmetic,
// and who the assistant is. The counting and arithmetic answers use the calculator tool the way
// nanochat's GSM8K data does (a Python part, its output part), and end with "#### <answer>" so
// that they are judged like GSM8K (hub_tasks.h gsm8k_extract_answer).
//
// Every example is a pure function of (task, split, seed, index): the same on every machine and
// every run. Train and test never share a problem: SpellingBee splits the words (a seeded
// permutation of the list, 1 word in 10 to test), Arithmetic the (a, op, b) triples (by a hash),
// Identity the phrasings of each question.
//
//  SpellingBee  "Spell the word 'apple'." -> "a-p-p-l-e\n\n#### a-p-p-l-e"            (even index)
//               "How many 'p' are in 'apple'?" -> spelled out, Python 'apple'.count('p') -> 2,
//               "... #### 2"                                                        (odd index)
//  Arithmetic   "What is 37 + 58?" -> Python 37 + 58 -> 95, "... #### 95"   (+, - on 0..999, * on 2..99)
//  Identity     "Who are you?" -> an answer naming nanochat; judged by the name appearing
#include <cstdint>
#include <string>

#include "nanochat/tasks/task.h"

namespace nanochat::tasks {

/// Default sizes (examples) of the synthetic tasks' splits.
inline constexpr int64_t kSyntheticTrainSize = 20000;
inline constexpr int64_t kSyntheticTestSize = 1000;

/// SpellingBee over the words of `words_path` (one a line; kept: 3..12 letters a-z only) for
/// split "train" or "test". Throws nanochat::Error naming the file (and the package that provides
/// it) when it cannot be read or holds fewer than 100 usable words.
TaskPtr make_spelling_bee(const std::string& split, const std::string& words_path, uint64_t seed = 0,
                          int64_t size = -1);
/// Arithmetic for split "train" or "test" (size -1: the default for the split).
TaskPtr make_arithmetic(const std::string& split, uint64_t seed = 0, int64_t size = -1);
/// Identity conversations for split "train" (every question in its train phrasings, repeated to
/// 100 examples by default) or "test" (the held-out phrasings).
TaskPtr make_identity(const std::string& split, int64_t size = -1);

/// The text after the first "#### " up to the end of its line, without surrounding whitespace;
/// "" when there is none.
std::string final_answer_line(const std::string& text);

}  // namespace nanochat::tasks

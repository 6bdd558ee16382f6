#pragma once
// nanochat's tasks over hub datasets (hub.h), example for example (nanochat tasks/smoltalk.py,
// mmlu.py, gsm8k.py, arc.py, humaneval.py, commit 92d63d4). Each reads its dataset's parquet
// files at construction and orders its rows as nanochat does (HubDataset.shuffle(42)); get(i)
// builds example i from its row. Open them by name with registry.h open_task.
//
//  task       repo (subset / splits)                            columns read
//  SmolTalk   HuggingFaceTB/smol-smoltalk (default / train,test) messages.content, messages.role
//  MMLU       cais/mmlu (all / auxiliary_train,validation,dev,test)  question, choices, answer, subject
//  GSM8K      openai/gsm8k (main,socratic / train,test)          question, answer
//  ARC-Easy, ARC-Challenge  allenai/ai2_arc (ARC-Easy,ARC-Challenge / train,validation,test)
//                                                                question, choices.text, choices.label, answerKey
//  HumanEval  openai/openai_humaneval (openai_humaneval / test)  prompt, canonical_solution, entry_point, test
//
// The helpers below are nanochat's, exposed for tests and for the chat evaluation.
#include <optional>
#include <string>
#include <vector>

#include "nanochat/tasks/hub.h"
#include "nanochat/tasks/task.h"

namespace nanochat::tasks {

/// SmolTalk / MMLU / GSM8K / ARC / HumanEval over the dataset in `dir` (hub_dataset_dir).
/// `name` is the task's name (for ARC the subset, "ARC-Easy" or "ARC-Challenge"); `download` the
/// command that fetches it (for errors). Throws like HubTable.
TaskPtr make_smoltalk(const std::string& dir, const std::string& download);
TaskPtr make_mmlu(const std::string& dir, const std::string& download);
TaskPtr make_gsm8k(const std::string& dir, const std::string& download);
TaskPtr make_arc(const std::string& name, const std::string& dir, const std::string& download);
TaskPtr make_humaneval(const std::string& dir, const std::string& download);

/// GSM8K's reference solution as assistant parts (nanochat GSM8K.get_example): the text is split
/// at every "<<expr=result>>" (Python re.split(r'(<<[^>]+>>)')); each annotation becomes a Python
/// part (expr, the text before the last '=') and a PythonOutput part (result, after it; "" and
/// the whole text as expr when there is no '='); the text between annotations becomes Text parts,
/// empty ones included.
std::vector<ContentPart> gsm8k_parts(const std::string& answer);
/// The number after the first "#### " (nanochat gsm8k.py extract_answer: regex
/// "#### (\-?[0-9\.\,]+)", commas removed); nullopt when there is none.
std::optional<std::string> gsm8k_extract_answer(const std::string& text);

/// The import lines at the top of a HumanEval prompt (nanochat humaneval.py extract_imports):
/// stripped lines starting "import " or "from ", up to the first other non-empty, non-comment
/// line, joined by "\n".
std::string humaneval_imports(const std::string& prompt);
/// The code of a completion (nanochat humaneval.py extract_program): the first fenced block
/// (regex "```(?:python)?\s*\n(.*?)\n```", DOTALL) stripped, else the whole completion stripped.
std::string humaneval_program(const std::string& completion);
/// The program HumanEval runs to judge a completion: imports, "\n\n", the completion's code,
/// "\n\n", the test code, "\n", "check(<entry_point>)".
std::string humaneval_check_program(const std::string& prompt, const std::string& completion, const std::string& test,
                                    const std::string& entry_point);

}  // namespace nanochat::tasks

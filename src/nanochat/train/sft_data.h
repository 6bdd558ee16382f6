#pragma once
// chat-sft's rows: nanochat's scripts/chat_sft.py sft_data_generator_bos_bestfit (commit 92d63d4)
// on the one-process stream, and the step-level stream chat-sft's trainer reads.
//
// Packing (SftPacker), row by row: a buffer of `buffer_size` (100) rendered conversations is
// refilled in dataset order (cursor 0, 1, 2, ..., wrapping around at the end, epoch + 1 at each
// wrap); a row of T+1 tokens takes, while it has room, the longest conversation in the buffer that
// fits whole (the first of equal lengths); when none fits, the rest of the row is BOS padding and
// the row is done. A conversation is never cropped across rows. Each consumed conversation counts
// one towards `consumed`.
//
// Rows are (T+1) int32 with the training mask inside them: a token whose target is trained (mask 1
// in render_conversation) is stored as its id, any other (prompts, specials, tool output, padding)
// as ~id (= -id - 1 < 0). split_rows (feed/step_source.h) decodes them into inputs (ids) and
// targets (the id, or -1 where untrained), so nanochat's targets[mask[1:] == 0] = -1 and the
// padding's -1 come out of the one rows format that the data feed already carries.
//
// Differences from nanochat, on purpose:
//  * Order: nanochat's rank r renders conversations r, r+W, r+2W, ...; here the one stream is
//    nanochat's at W = 1 whatever the world size (node 0 serves each step's rows and the balancer
//    deals them), so results do not depend on the number of ranks or the split.
//  * Length: render_conversation cuts at 2048 tokens; here at min(2048, T+1), since a conversation
//    longer than a row never fits and nanochat would keep it in the buffer for ever (with T + 1
//    >= 2048 this is nanochat's cut). Cut conversations are counted (`truncated`).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/feed/step_source.h"
#include "nanochat/tasks/task.h"

namespace nanochat {

class Tokenizer;

/// Encodes a row token with its training mask (see above): id if trained, else ~id.
inline int32_t encode_masked(int32_t id, bool trained) { return trained ? id : ~id; }

/// nanochat's best-fit SFT packer over one dataset, one row at a time.
class SftPacker {
 public:
  /// `state`: a state() to continue from (null = the start). Throws nanochat::Error when the
  /// dataset is empty, T < 1, or the state does not fit the dataset (another file?).
  SftPacker(const Tokenizer& tok, tasks::TaskPtr dataset, int T, const nlohmann::json* state = nullptr,
            int buffer_size = 100);

  /// Packs the next row: T+1 encoded tokens into `row`. Throws nanochat::Error naming the
  /// dataset and example when a conversation cannot be rendered.
  void next_row(int32_t* row);

  /// {"cursor", "consumed", "epoch", "rows", "truncated", "rendered", "buffer": [example indices]}:
  /// everything needed to continue exactly (the buffer is rendered again from its indices).
  nlohmann::json state() const;

  int64_t consumed() const { return consumed_; }
  int64_t epoch() const { return epoch_; }
  int64_t rows() const { return rows_; }
  int64_t truncated() const { return truncated_; }
  int64_t rendered() const { return rendered_; }
  int64_t dataset_size() const { return size_; }
  /// The length a conversation is cut to: min(2048, T+1).
  int max_tokens() const { return max_tokens_; }

 private:
  struct Entry {
    int64_t index;
    std::vector<int32_t> ids;  // encoded
  };
  Entry render(int64_t index);
  void refill();

  const Tokenizer& tok_;
  tasks::TaskPtr data_;
  int T_, buffer_size_, max_tokens_;
  int32_t bos_;
  int64_t size_;
  int64_t cursor_ = 0, consumed_ = 0, epoch_ = 1, rows_ = 0, truncated_ = 0, rendered_ = 0;
  std::vector<Entry> buffer_;
};

/// chat-sft's settings of its stream.
struct SftStreamConfig {
  int T = 2048;
  int64_t rows_per_step = 1;    ///< R = total batch / T: the rows of one step
  int64_t num_iterations = -1;  ///< --num-iterations (<= 0: one epoch)
};

/// The step-level stream of chat-sft (a RowStream for feed/step_source.h). nanochat's loop at W = 1
/// with one micro-batch per step (its generator's batch = a step's R rows): the rows of step k are
/// the generator's call k+1; the run ends before step k (StepRows::end) when after call k+1 the
/// epoch has been consumed or k+1 >= num_iterations (so --num-iterations N trains N-1 steps, as
/// nanochat's counter, which counts the batches fetched one ahead, does); step k's progress (its LR)
/// is the approximate progress after call k+2 (nanochat fetches the next batch before the update):
/// (k+2)/N with --num-iterations, else consumed / dataset size.
/// `val`: the val mixture, packed from its start for every evaluation in batches of B rows.
/// Throws like SftPacker.
std::unique_ptr<RowStream> make_sft_stream(const Tokenizer& tok, tasks::TaskPtr train, tasks::TaskPtr val,
                                           const SftStreamConfig& cfg, const nlohmann::json* state);

/// chat-sft's last word on its packing, from a SftPacker::state() (missing fields read as 0, the
/// epoch as 1): the conversations packed into rows, the epoch, the conversations rendered (the
/// packed ones plus those still in the packing buffer when the run ended, never trained) and how
/// many renders were longer than a row of `row_tokens` tokens and cut to it, e.g.
/// "Conversations packed into rows: 3842 (epoch 1); rendered: 3942 (the 3842 packed and 100 still
/// in the packing buffer at the end); renders longer than a row of 2049 tokens and cut to it: 0 of
/// the 3942".
std::string sft_packing_summary(const nlohmann::json& packer, int row_tokens);

}  // namespace nanochat

// chat-sft's packing and step stream (sft_data.h).
#include "nanochat/train/sft_data.h"

#include <algorithm>
#include <limits>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/tokenizer/conversation.h"
#include "nanochat/tokenizer/tokenizer.h"

using json = nlohmann::json;

namespace nanochat {

SftPacker::SftPacker(const Tokenizer& tok, tasks::TaskPtr dataset, int T, const json* state, int buffer_size)
    : tok_(tok),
      data_(std::move(dataset)),
      T_(T),
      buffer_size_(buffer_size),
      max_tokens_(std::min(kRenderMaxTokens, T + 1)),
      bos_(tok.bos_id()),
      size_(data_ ? data_->size() : 0) {
  if (size_ <= 0) fail("chat-sft: the dataset ", data_ ? data_->name() : std::string("(none)"), " has no conversation");
  if (T < 1 || buffer_size < 1) fail("chat-sft: bad packing settings T=", T, " buffer=", buffer_size);
  if (!state || state->is_null()) return;
  try {
    cursor_ = state->at("cursor").get<int64_t>();
    consumed_ = state->at("consumed").get<int64_t>();
    epoch_ = state->at("epoch").get<int64_t>();
    rows_ = state->at("rows").get<int64_t>();
    truncated_ = state->at("truncated").get<int64_t>();
    rendered_ = state->at("rendered").get<int64_t>();
    const std::vector<int64_t> buffer = state->at("buffer").get<std::vector<int64_t>>();
    if (cursor_ < 0 || cursor_ >= size_) fail("cursor ", cursor_, " is outside the dataset's ", size_, " examples");
    for (int64_t i : buffer) {
      if (i < 0 || i >= size_) fail("buffered example ", i, " is outside the dataset's ", size_, " examples");
      const int64_t before = truncated_;
      buffer_.push_back(render(i));
      truncated_ = before;  // counted when it was first rendered
      --rendered_;
    }
  } catch (const std::exception& e) {
    fail("chat-sft: the saved data state does not fit the dataset ", data_->name(), " (", size_,
         " conversations; another mixture or file than the run that saved it?): ", e.what());
  }
}

SftPacker::Entry SftPacker::render(int64_t index) {
  Entry e;
  e.index = index;
  RenderedConversation r;
  try {
    r = render_conversation(tok_, data_->get(index).conversation, std::numeric_limits<int>::max());
  } catch (const std::exception& ex) {
    fail("chat-sft: example ", index, " of ", data_->name(), ": ", ex.what());
  }
  if (r.ids.size() > static_cast<size_t>(max_tokens_)) {
    r.ids.resize(static_cast<size_t>(max_tokens_));
    r.mask.resize(r.ids.size());
    ++truncated_;
  }
  ++rendered_;
  e.ids.resize(r.ids.size());
  for (size_t i = 0; i < r.ids.size(); ++i) e.ids[i] = encode_masked(r.ids[i], r.mask[i] != 0);
  return e;
}

void SftPacker::refill() {
  while (static_cast<int>(buffer_.size()) < buffer_size_) {
    buffer_.push_back(render(cursor_));
    if (++cursor_ >= size_) {
      cursor_ = 0;
      ++epoch_;
    }
  }
}

void SftPacker::next_row(int32_t* row) {
  const size_t cap = static_cast<size_t>(T_) + 1;
  size_t len = 0;
  while (len < cap) {
    refill();
    const size_t remaining = cap - len;
    int best = -1;
    size_t best_len = 0;
    for (size_t i = 0; i < buffer_.size(); ++i) {
      const size_t n = buffer_[i].ids.size();
      if (n <= remaining && n > best_len) {
        best = static_cast<int>(i);
        best_len = n;
      }
    }
    if (best < 0) {  // nothing fits: pad the rest with BOS, not trained
      std::fill(row + len, row + cap, encode_masked(bos_, false));
      break;
    }
    const Entry& e = buffer_[static_cast<size_t>(best)];
    std::copy(e.ids.begin(), e.ids.end(), row + len);
    len += e.ids.size();
    buffer_.erase(buffer_.begin() + best);
    ++consumed_;
  }
  ++rows_;
}

json SftPacker::state() const {
  std::vector<int64_t> buffer;
  for (const Entry& e : buffer_) buffer.push_back(e.index);
  return json{{"cursor", cursor_},       {"consumed", consumed_}, {"epoch", epoch_}, {"rows", rows_},
              {"truncated", truncated_}, {"rendered", rendered_}, {"buffer", buffer}};
}

namespace {

// One call of nanochat's generator: `n` rows and the packer's state after them.
struct Call {
  std::vector<int32_t> rows;
  json state;
  int64_t consumed = 0;
};

class SftStream : public RowStream {
 public:
  SftStream(const Tokenizer& tok, tasks::TaskPtr train, tasks::TaskPtr val, const SftStreamConfig& cfg,
            const json* state)
      : tok_(tok), val_(std::move(val)), cfg_(cfg) {
    const json* packer_state = state && !state->is_null() ? &state->at("packer") : nullptr;
    calls_ = state && !state->is_null() ? state->at("calls").get<int64_t>() : 0;
    packer_ = std::make_unique<SftPacker>(tok, std::move(train), cfg.T, packer_state);
    if (val_) SftPacker(tok, val_, cfg.T);  // an empty val set is named before the first step
  }

  StepRows next_step(int64_t step) override {
    if (!ahead_) ahead_ = std::make_unique<Call>(call());
    StepRows s;
    s.step = step;
    s.rows = std::move(ahead_->rows);
    const int64_t k1 = calls_;  // the calls made so far: this step's rows are call k1
    const Call now = std::move(*ahead_);
    ahead_.reset();
    s.loader_state = state_json(now.state, k1);
    const int64_t size = packer_->dataset_size();
    s.end = (cfg_.num_iterations > 0 && k1 >= cfg_.num_iterations) || now.consumed >= size;
    if (s.end) {
      s.progress = progress(k1, now.consumed);
    } else {  // nanochat fetches the next batch before the update: the progress after it
      ahead_ = std::make_unique<Call>(call());
      s.progress = progress(calls_, ahead_->consumed);
    }
    s.loader_state["epoch"] = now.state.at("epoch");
    return s;
  }

  json state() const override {
    NC_CHECK(!ahead_, "the SFT stream's state is asked for between a step and its look-ahead");
    return state_json(packer_->state(), calls_);
  }

  std::function<void(int32_t*)> val_rows(int B) override {
    if (!val_) fail("chat-sft: no validation conversations to evaluate on");
    auto packer = std::make_shared<SftPacker>(tok_, val_, cfg_.T);
    const size_t row = static_cast<size_t>(cfg_.T) + 1;
    return [packer, B, row](int32_t* rows) {
      for (int b = 0; b < B; ++b) packer->next_row(rows + static_cast<size_t>(b) * row);
    };
  }

 private:
  Call call() {
    Call c;
    const size_t row = static_cast<size_t>(cfg_.T) + 1;
    c.rows.resize(static_cast<size_t>(cfg_.rows_per_step) * row);
    for (int64_t r = 0; r < cfg_.rows_per_step; ++r) packer_->next_row(c.rows.data() + static_cast<size_t>(r) * row);
    ++calls_;
    c.state = packer_->state();
    c.consumed = packer_->consumed();
    return c;
  }
  double progress(int64_t calls, int64_t consumed) const {
    if (cfg_.num_iterations > 0) return static_cast<double>(calls) / static_cast<double>(cfg_.num_iterations);
    return static_cast<double>(consumed) / static_cast<double>(packer_->dataset_size());
  }
  static json state_json(const json& packer, int64_t calls) { return json{{"packer", packer}, {"calls", calls}}; }

  const Tokenizer& tok_;
  tasks::TaskPtr val_;
  SftStreamConfig cfg_;
  std::unique_ptr<SftPacker> packer_;
  int64_t calls_ = 0;
  std::unique_ptr<Call> ahead_;
};

}  // namespace

std::unique_ptr<RowStream> make_sft_stream(const Tokenizer& tok, tasks::TaskPtr train, tasks::TaskPtr val,
                                           const SftStreamConfig& cfg, const json* state) {
  return std::make_unique<SftStream>(tok, std::move(train), std::move(val), cfg, state);
}

std::string sft_packing_summary(const json& packer, int row_tokens) {
  const int64_t packed = packer.value("consumed", int64_t{0}), rendered = packer.value("rendered", int64_t{0});
  return str_cat("Conversations packed into rows: ", packed, " (epoch ", packer.value("epoch", int64_t{1}),
                 "); rendered: ", rendered, " (the ", packed, " packed and ", rendered - packed,
                 " still in the packing buffer at the end); renders longer than a row of ", row_tokens,
                 " tokens and cut to it: ", packer.value("truncated", int64_t{0}), " of the ", rendered);
}

}  // namespace nanochat

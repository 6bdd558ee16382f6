#include "nanochat/cluster/regroup.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "nanochat/cluster/net.h"
#include "nanochat/core/error.h"

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO

namespace {

const char* kJoinPrefix = "nc/join/";

std::unique_ptr<StoreClient> connect_store(const DistEnv& env, const DistOptions& o, const std::string& identity) {
  StoreClientOptions co;
  co.host = env.master_addr;
  co.port = env.master_port;
  co.job_token = o.job_token.value_or("");
  co.connect_timeout = *o.rendezvous_timeout;
  co.identity = identity;
  return std::make_unique<StoreClient>(co);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rank 0: the old ranks that stay, once each checked in or `wait` passed.
std::vector<int> collect_members(Store& store, int W, int lost, Ms wait) {
  const auto deadline = Clock::now() + wait;
  std::vector<int> members{0};
  for (;;) {
    members.assign(1, 0);
    bool all = true;
    for (int j = 1; j < W; ++j) {
      if (store.try_get(str_cat("regroup/alive/", j))) {
        members.push_back(j);
      } else if (j != lost && !store.try_get(str_cat("dead/", j))) {
        all = false;  // not lost as far as rank 0 knows: give it until the deadline
      }
    }
    if (all || Clock::now() >= deadline) return members;
    std::this_thread::sleep_for(Ms(50));
  }
}

// Rank 0 below the minimum: waits for joiners until staying + joining ranks reach it, saying every
// report interval who is missing; false when the timeout passed first.
bool wait_for_minimum(size_t staying, const RegroupPlan& p, const std::string& missing) {
  if (static_cast<int>(staying) >= p.min_world) return true;
  const auto t0 = Clock::now();
  auto next = t0;
  for (;;) {
    const size_t joining = p.desk ? p.desk->waiting().size() : 0;
    if (static_cast<int>(staying + joining) >= p.min_world) return true;
    if (Clock::now() >= t0 + p.below_min_timeout) return false;
    if (Clock::now() >= next) {
      next = Clock::now() + wait_report_interval();
      std::printf(
          "Elastic job below its minimum: %zu of at least %d ranks (%zu staying, %zu asking to join); %s; waiting "
          "for a node to join (run its `nanochat run` command again) (%ld s of %g s, then node 0 stops the job with "
          "its checkpoint)\n",
          staying + joining, p.min_world, staying, joining, missing.c_str(), std::lround(seconds_since(t0)),
          p.below_min_timeout.count() / 1000.0);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(Ms(200));
  }
}

}  // namespace

Ms below_min_timeout() { return env_seconds("NANOCHAT_ELASTIC_WAIT_TIMEOUT", Ms(600000)); }

Admission request_to_join(const DistEnv& env, const DistOptions& options, Ms extra) {
  const DistOptions o = options.resolved();
  const std::string host = host_name();
  const std::string who =
      str_cat("local rank ", env.local_rank, " of node ", env.rank / std::max(1, env.local_world_size), " (host ", host,
              ", pid ", getpid(), ")");
  auto client = connect_store(env, o, "joining " + who);
  PrefixStore store(*client, kJoinPrefix);
  const int64_t t = store.add("next", 1);
  client->set_will(str_cat(kJoinPrefix, "gone/", t), who);
  store.set(str_cat("req/", t), nlohmann::json{{"who", who}, {"host", host}}.dump());
  const auto t0 = Clock::now();
  const Ms limit = *o.rendezvous_timeout + extra;
  const std::string where = host_port(env.master_addr, env.master_port);
  std::printf("%s asks the job at %s to admit it at its next step boundary (ticket %lld)\n", who.c_str(), where.c_str(),
              static_cast<long long>(t));
  std::fflush(stdout);
  for (;;) {
    try {
      const std::string v = store.get(str_cat("ans/", t), std::min<Ms>(wait_report_interval(), limit));
      const auto j = nlohmann::json::parse(v);
      if (j.contains("refused")) fail(who, ": node 0 did not admit it: ", j.at("refused").get<std::string>());
      Admission a;
      a.env = env;
      a.env.rank = j.at("rank").get<int>();
      a.env.world_size = j.at("world_size").get<int>();
      a.options = o;
      a.options.generation = j.at("generation").get<int>();
      a.step = j.at("step").get<int64_t>();
      a.waited_s = seconds_since(t0);
      return a;
    } catch (const StoreTimeout&) {
      if (Clock::now() >= t0 + limit)
        fail(who, ": node 0 (", where, ") did not admit it within ", limit.count() / 1000.0, " s (ticket ", t,
             "): is the job still training? Node 0 admits a node at the end of a step");
      std::printf("%s: waiting for node 0 (%s) to admit it at the job's next step boundary (%ld s of %g s)\n",
                  who.c_str(), where.c_str(), std::lround(seconds_since(t0)), limit.count() / 1000.0);
      std::fflush(stdout);
    }
  }
}

JoinDesk::JoinDesk(const DistEnv& env, const DistOptions& options) {
  const DistOptions o = options.resolved();
  client_ = connect_store(env, o, str_cat("rank 0's join desk on ", host_name()));
  store_ = std::make_unique<PrefixStore>(*client_, kJoinPrefix);
}

JoinDesk::~JoinDesk() = default;

std::vector<int64_t> JoinDesk::waiting() {
  const int64_t next = store_->add("next", 0);
  for (int64_t t = seen_ + 1; t <= next; ++t) open_.push_back(t);
  seen_ = std::max(seen_, next);
  std::vector<int64_t> live, still_open;
  for (int64_t t : open_) {
    if (store_->try_get(str_cat("gone/", t))) continue;  // it gave up or died while waiting: never again
    still_open.push_back(t);
    if (store_->try_get(str_cat("req/", t))) live.push_back(t);  // else: ticket taken, request not written yet
  }
  open_ = std::move(still_open);
  return live;
}

std::string JoinDesk::describe(int64_t ticket) {
  try {
    if (auto v = store_->try_get(str_cat("req/", ticket)))
      return nlohmann::json::parse(*v).value("who", str_cat("ticket ", ticket));
  } catch (const std::exception&) {
  }
  return str_cat("ticket ", ticket);
}

void JoinDesk::answer(int64_t ticket, const std::string& json) {
  store_->set(str_cat("ans/", ticket), json);
  open_.erase(std::remove(open_.begin(), open_.end(), ticket), open_.end());
}

void JoinDesk::close(const std::string& why, const std::vector<long>& nodes) {
  try {
    client_->set("nc/launch/nodes_at_end", nlohmann::json(nodes).dump());
    store_->set("closed", why);
    for (int64_t t : waiting()) answer(t, nlohmann::json{{"refused", why}}.dump());
  } catch (const Error&) {
    // the job is ending; a joiner still waiting then names the store it cannot reach
  }
}

Regrouped regroup(GlooCommunicator* old, int generation, const DistEnv& env, const DistOptions& options,
                  const RegroupPlan& p) {
  const int me = old ? old->rank() : 0;
  Regrouped out;
  out.generation = generation + 1;
  std::vector<int64_t> tickets;
  if (me == 0) {
    out.members =
        old && p.lost >= 0 ? collect_members(old->store(), old->world_size(), p.lost, p.wait) : std::vector<int>{0};
    if (old && p.lost < 0)  // nodes join: every old rank stays
      for (int j = 1; j < old->world_size(); ++j) out.members.push_back(j);
    std::string missing = "nobody left";
    if (old && p.lost >= 0) missing = str_cat(old->describe_rank(p.lost), " left");
    out.step = p.step;
    out.stop = !wait_for_minimum(out.members.size(), p, missing);
    if (!out.stop && p.desk) tickets = p.desk->waiting();
    nlohmann::json j = {{"members", out.members}, {"joined", tickets}, {"step", out.step}, {"stop", out.stop}};
    if (old) old->store().set("regroup/members", j.dump());
    const int world = static_cast<int>(out.members.size() + tickets.size());
    for (size_t i = 0; i < tickets.size(); ++i) {
      out.joined.push_back(p.desk->describe(tickets[i]));
      p.desk->answer(tickets[i], nlohmann::json{{"generation", out.generation},
                                                {"rank", static_cast<int>(out.members.size() + i)},
                                                {"world_size", world},
                                                {"step", out.step}}
                                     .dump());
    }
  } else {
    Store& store = old->store();
    if (p.lost >= 0) store.set(str_cat("regroup/alive/", me), "1");
    const nlohmann::json j = nlohmann::json::parse(
        store.get("regroup/members", p.wait + p.below_min_timeout + *old->options().rendezvous_timeout));
    out.members = j.at("members").get<std::vector<int>>();
    out.step = j.at("step").get<int64_t>();
    out.stop = j.value("stop", false);
    for (size_t i = 0; i < j.at("joined").size(); ++i) out.joined.push_back("a node that joined");
  }
  const auto at = std::find(out.members.begin(), out.members.end(), me);
  if (at == out.members.end())
    throw LeftOut(str_cat("rank ", me, " (job generation ", generation,
                          "): the job went on without this rank (it did not answer in time: it was frozen, asleep or "
                          "cut off when another rank left)"));
  const int world = static_cast<int>(out.members.size() + out.joined.size());
  if (out.stop || world == 1) return out;  // rank 0 alone: the caller goes on as one process
  DistEnv next = env;
  next.rank = static_cast<int>(at - out.members.begin());
  next.world_size = world;
  DistOptions opts = options;
  opts.generation = out.generation;
  out.comm = std::make_unique<GlooCommunicator>(next, opts);
  return out;
}

std::string left_out_message(GlooCommunicator& comm) {
  try {
    const auto v = comm.store().try_get("regroup/members");
    if (!v) return "";
    const auto members = nlohmann::json::parse(*v).at("members").get<std::vector<int>>();
    if (std::find(members.begin(), members.end(), comm.rank()) != members.end()) return "";
    return str_cat("the job went on without this rank (ranks ", nlohmann::json(members).dump(), " of generation ",
                   comm.options().generation,
                   " regrouped while this one did not answer: it was frozen, asleep or cut off); nothing of it "
                   "is lost (node 0 holds the run)");
  } catch (const std::exception&) {
    return "";
  }
}

#endif

}  // namespace nanochat::cluster

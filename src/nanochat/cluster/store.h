#pragma once
// TCP key-value store for rendezvous (docs/architecture.md 3.7). Gloo ships no network store, so the job
// runs its own: node 0's launcher (or rank 0 when ranks are started by hand) hosts a StoreServer
// on MASTER_ADDR:MASTER_PORT and every process talks to it through a StoreClient.
//
// Protocol: length-prefixed frames (u32 little-endian length, then an opcode and fields). A
// client's first frame is a handshake carrying the protocol version and the job token
// (NANOCHAT_JOB_TOKEN); a wrong token is refused and both sides report it. The token guards
// against two jobs meeting on one port by accident; it is sent in clear, it is not a secret.
//
// A client may leave a "last will": a key the server sets when the connection drops without a
// goodbye (process killed, host gone). Ranks use it so survivors can name a dead peer.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/core/error.h"

namespace nanochat::cluster {

/// A store wait (get/wait) ran past its deadline. The message names the keys and the store.
class StoreTimeout : public Error {
 public:
  explicit StoreTimeout(const std::string& msg) : Error(msg) {}
};

/// Key-value store interface. Values are arbitrary byte strings. Every blocking call has a
/// deadline and throws StoreTimeout when it passes; connection failures throw nanochat::Error
/// (ConnectionLost, cluster/net.h, when the store's host closed or reset the connection).
class Store {
 public:
  virtual ~Store() = default;
  /// Sets key to value (overwrites) and wakes every waiter on it.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Blocks until `key` exists, then returns its value. Throws StoreTimeout after `timeout`.
  virtual std::string get(const std::string& key, Ms timeout) = 0;
  /// The value of `key` if it exists now (never blocks on the key).
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  /// Blocks until every key exists. Throws StoreTimeout (naming the missing keys) after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Ms timeout) = 0;
  /// Atomically adds delta to the integer stored at key (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// True if every key exists now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Deletes key; returns whether it existed.
  virtual bool erase(const std::string& key) = 0;
  /// "the store at HOST:PORT", for error messages.
  virtual std::string where() const = 0;
};

/// A view of another store with every key prefixed (e.g. "nc/g3/" for generation 3 of a job), so
/// a job can rebuild its rendezvous without colliding with stale keys. Keeps a reference: the
/// underlying store must outlive it.
class PrefixStore final : public Store {
 public:
  PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override { base_.set(prefix_ + key, value); }
  std::string get(const std::string& key, Ms timeout) override { return base_.get(prefix_ + key, timeout); }
  std::optional<std::string> try_get(const std::string& key) override { return base_.try_get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys, Ms timeout) override;
  int64_t add(const std::string& key, int64_t delta) override { return base_.add(prefix_ + key, delta); }
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override { return base_.erase(prefix_ + key); }
  std::string where() const override { return base_.where(); }
  const std::string& prefix() const { return prefix_; }

 private:
  Store& base_;
  std::string prefix_;
};

/// The store host: listens on the wildcard address (IPv4 and IPv6) and serves clients from one
/// background thread (poll loop; blocked gets/waits are parked, not threads).
class StoreServer {
 public:
  /// Binds `port` (0 = a free port, see port()). `host_label` names this host in error messages.
  /// Throws nanochat::Error port_in_use_message() when the port is taken.
  StoreServer(int port, std::string job_token, std::string host_label = "");
  /// Stops the server thread and closes every connection.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  /// Connections that passed the handshake and are still open.
  size_t num_clients() const;
  /// Connections refused so far (wrong job token, wrong protocol, not a store client).
  size_t num_rejected() const;
  /// Waits until at most n clients are connected or the timeout passes; returns whether it held.
  bool wait_clients_at_most(size_t n, Ms timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// How a client reaches the store.
struct StoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string job_token;       ///< must equal the server's token
  Ms connect_timeout{300000};  ///< keep retrying (with backoff) this long; 0 = one attempt
  Ms attempt_timeout{2000};    ///< bound of one connect attempt (DROP firewalls)
  Ms op_timeout{60000};        ///< bound of a non-blocking request's answer
  std::string identity;        ///< shown by the server in its logs (e.g. "rank 3 on h1")
  /// Called after each failed connection attempt with its error, before the backoff sleep; it may
  /// print progress or throw to give up early (the exception propagates out of the constructor).
  std::function<void(const std::string& last_error)> on_retry;
};

/// A connection to a StoreServer. Thread-safe: requests are serialised on one socket, so a long
/// get() blocks other threads' requests on the same client; use a second client for those.
class StoreClient final : public Store {
 public:
  /// Connects (retrying until connect_timeout) and performs the handshake. Throws
  /// nanochat::Error "cannot reach the store at HOST:PORT after Ns: ..." or a job-token error.
  explicit StoreClient(StoreClientOptions opts);
  /// Says goodbye (the last will is not applied) and closes the connection.
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Ms timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Ms timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;
  std::string where() const override;

  /// The server sets key = value if this connection ends without a goodbye (replaces any
  /// earlier will).
  void set_will(const std::string& key, const std::string& value);
  /// Number of connection attempts the constructor needed (tests, doctor).
  int connect_attempts() const { return attempts_; }

 private:
  std::string request(const std::string& frame, Ms answer_timeout, uint8_t* status);
  StoreClientOptions opts_;
  std::mutex mu_;
  Fd fd_;
  int attempts_ = 0;
  bool broken_ = false;
};

/// Waits like store.wait(keys, timeout) (StoreTimeout after `timeout`), printing to stderr every
/// wait_report_interval() (cluster/env.h) "<describe(missing)> (N s of M s)", where `missing` holds
/// the indices of the keys not there yet. Only the caller whose `self` is the lowest index of a
/// key already present prints, so a job whose processes all wait prints one line per interval.
void wait_and_report(Store& store, const std::vector<std::string>& keys, Ms timeout, size_t self,
                     const std::function<std::string(const std::vector<size_t>& missing)>& describe);

/// "port P on HOST is already in use by pid N (its command line). If that is a launcher or rank
/// left over ... stop it (`kill N`) ...; otherwise pick another --master-port": the holders come
/// from tcp_port_holders(); when none is visible the message says how to find it as root.
std::string port_in_use_message(int port, const std::string& host_label);

/// The job token of this process: NANOCHAT_JOB_TOKEN, or "" when unset.
std::string job_token_from_env();

}  // namespace nanochat::cluster

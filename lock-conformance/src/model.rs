//! The model-based test: random operation sequences from several clients on a
//! few names, checked against a reference model of a lock service: the mutex,
//! and where the backend offers them, the read-write lock and the semaphore.
//!
//! A try or an extension that fails retryably is made again, as a caller
//! would (`as_a_caller`), and its final answer is checked; a release or a
//! downgrade, which give the guard up, must succeed the first time.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{
    AcquireOptions, Capabilities, FencingToken, LockGuard, LockMode, LockName, LockService,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

use crate::{unique_name, Harness};

/// Clients in a sequence.
pub const CLIENTS: usize = 3;
/// Names in a sequence.
pub const NAMES: usize = 2;
/// Permits of the semaphores in a sequence.
pub const PERMITS: u32 = 2;

/// Which kind of lease an operation asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Take {
    /// The mutex.
    Mutex,
    /// The read side of the read-write lock.
    Read,
    /// The write side of the read-write lock.
    Write,
    /// A permit of the semaphore ([`PERMITS`]).
    Permit,
}

/// The kind of lock a lease belongs to: a client holds at most one lease of
/// each kind on a name in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Slot {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Take {
    fn slot(self) -> Slot {
        match self {
            Take::Mutex => Slot::Mutex,
            Take::Read | Take::Write => Slot::ReadWrite,
            Take::Permit => Slot::Semaphore,
        }
    }
}

/// One step of a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Client `c` tries to take name `n` as `Take`.
    TryAcquire(usize, usize, Take),
    /// Client `c` releases its lease of that kind on `n`, if it has one.
    Release(usize, usize, Take),
    /// Client `c` extends its lease of that kind on `n`, if it has one.
    Extend(usize, usize, Take),
    /// Client `c` downgrades its write lease on `n`, if it has one.
    Downgrade(usize, usize),
    /// Every lease on name `n` is removed behind its holders' backs; their
    /// guards are then released.
    Remove(usize),
}

/// Sequences of 1 to `max_len` operations on the primitives `caps` offers.
pub fn ops(max_len: usize, caps: &Capabilities) -> impl Strategy<Value = Vec<Op>> {
    let mut takes = vec![Take::Mutex];
    if caps.read_write {
        takes.extend([Take::Read, Take::Write]);
    }
    if caps.semaphore {
        takes.push(Take::Permit);
    }
    let rw = caps.read_write;
    let c = 0..CLIENTS;
    let n = 0..NAMES;
    let take = proptest::sample::select(takes);
    let op = prop_oneof![
        4 => (c.clone(), n.clone(), take.clone()).prop_map(|(c, n, t)| Op::TryAcquire(c, n, t)),
        3 => (c.clone(), n.clone(), take.clone()).prop_map(|(c, n, t)| Op::Release(c, n, t)),
        1 => (c.clone(), n.clone(), take).prop_map(|(c, n, t)| Op::Extend(c, n, t)),
        1 => (c, n.clone()).prop_map(move |(c, n)| if rw { Op::Downgrade(c, n) } else { Op::Remove(n) }),
        1 => n.prop_map(Op::Remove),
    ];
    proptest::collection::vec(op, 1..=max_len)
}

/// The reference model of one name.
#[derive(Default)]
struct Model {
    mutex: Option<usize>,
    readers: BTreeSet<usize>,
    writer: Option<usize>,
    permits: BTreeSet<usize>,
    last_token: HashMap<Slot, FencingToken>,
}

impl Model {
    /// Whether `take` by client `c` must be granted (`true`) or refused.
    fn grantable(&self, take: Take) -> bool {
        match take {
            Take::Mutex => self.mutex.is_none(),
            Take::Read => self.writer.is_none(),
            Take::Write => self.writer.is_none() && self.readers.is_empty(),
            Take::Permit => self.permits.len() < PERMITS as usize,
        }
    }

    fn hold(&mut self, c: usize, take: Take) {
        match take {
            Take::Mutex => self.mutex = Some(c),
            Take::Read => {
                self.readers.insert(c);
            }
            Take::Write => self.writer = Some(c),
            Take::Permit => {
                self.permits.insert(c);
            }
        }
    }

    fn drop_lease(&mut self, c: usize, slot: Slot) {
        match slot {
            Slot::Mutex => self.mutex = None,
            Slot::ReadWrite => {
                self.readers.remove(&c);
                if self.writer == Some(c) {
                    self.writer = None;
                }
            }
            Slot::Semaphore => {
                self.permits.remove(&c);
            }
        }
    }

    /// A new token of `slot` must be above every earlier one of that slot.
    fn check_token(&mut self, slot: Slot, token: Option<FencingToken>) -> Result<(), String> {
        let Some(t) = token else { return Ok(()) };
        if let Some(last) = self.last_token.get(&slot) {
            if t <= *last {
                return Err(format!("token {t} not above {last}"));
            }
        }
        self.last_token.insert(slot, t);
        Ok(())
    }
}

async fn try_take(
    client: &dyn LockService,
    name: &LockName,
    take: Take,
    o: &AcquireOptions,
) -> lock_core::Result<Option<LockGuard>> {
    match take {
        Take::Mutex => client.try_acquire(name, o).await,
        Take::Read => client.try_acquire_read(name, o).await,
        Take::Write => client.try_acquire_write(name, o).await,
        Take::Permit => client.try_acquire_permit(name, PERMITS, o).await,
    }
}

/// How long to wait between two tries of an operation that failed retryably.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Runs `call` as a caller that honours [`LockError::is_retryable`] would:
/// an operation that failed retryably (the backend could not decide in time:
/// a node's or the server's answer late on a busy machine) is made again
/// until it gets an answer. So does a try that `refused` while an earlier
/// try of it had failed: what that try left on the server is the client's
/// to remove within its request timeout, and the harnesses' request
/// timeouts are within their TTL. Both end `h.ttl() + h.slack()` after the
/// first failure; the last outcome is then returned as it is, and checked
/// against the model like any other. Each retry is reported on stderr.
///
/// [`LockError::is_retryable`]: lock_core::LockError::is_retryable
async fn as_a_caller<T, F, Fut>(
    h: &dyn Harness,
    refused: impl Fn(&T) -> bool,
    mut call: F,
) -> lock_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = lock_core::Result<T>>,
{
    let within = h.ttl() + h.slack();
    let mut first_failure: Option<Instant> = None;
    loop {
        let outcome = call().await;
        let again = match &outcome {
            Err(e) if e.is_retryable() => {
                eprintln!("model: a retryable failure, tried again: {e}");
                true
            }
            Ok(v) => first_failure.is_some() && refused(v),
            Err(_) => false,
        };
        let since = *first_failure.get_or_insert_with(Instant::now);
        if !again || since.elapsed() >= within {
            return outcome;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Runs `ops` against fresh clients of `h` and the model; `Err` describes the
/// first disagreement.
pub async fn check(h: &dyn Harness, ops: &[Op]) -> Result<(), String> {
    let mut clients: Vec<Arc<dyn LockService>> = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(h.client().await);
    }
    let names: Vec<LockName> = (0..NAMES)
        .map(|i| unique_name(&format!("model{i}")))
        .collect();
    // Long TTL, no keep-alive: nothing expires during a sequence by itself.
    let o = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .keep_alive(false);
    let mut models: Vec<Model> = (0..NAMES).map(|_| Model::default()).collect();
    let mut guards: HashMap<(usize, usize, Slot), LockGuard> = HashMap::new();

    for (step, op) in ops.iter().enumerate() {
        let at = |msg: String| format!("step {step} {op:?}: {msg}");
        match *op {
            Op::TryAcquire(c, n, take) => {
                if guards.contains_key(&(c, n, take.slot())) {
                    continue; // a client re-taking its own lock is not in the model
                }
                let grantable = models[n].grantable(take);
                let got = as_a_caller(
                    h,
                    |got: &Option<LockGuard>| grantable && got.is_none(),
                    || try_take(&*clients[c], &names[n], take, &o),
                )
                .await
                .map_err(|e| at(e.to_string()))?;
                let model = &mut models[n];
                match (model.grantable(take), got) {
                    (false, Some(_)) => return Err(at("granted against the model".into())),
                    (false, None) => {}
                    (true, None) => return Err(at("refused although grantable".into())),
                    (true, Some(g)) => {
                        model
                            .check_token(take.slot(), g.fencing_token())
                            .map_err(at)?;
                        model.hold(c, take);
                        guards.insert((c, n, take.slot()), g);
                    }
                }
            }
            Op::Release(c, n, take) => {
                if let Some(g) = guards.remove(&(c, n, take.slot())) {
                    let was = g.release().await.map_err(|e| at(e.to_string()))?;
                    if !was {
                        return Err(at("release of a held lock said not held".into()));
                    }
                    models[n].drop_lease(c, take.slot());
                }
            }
            Op::Extend(c, n, take) => {
                if let Some(g) = guards.get(&(c, n, take.slot())) {
                    as_a_caller(h, |_| false, || g.extend(Duration::from_secs(60)))
                        .await
                        .map_err(|e| at(e.to_string()))?;
                }
            }
            Op::Downgrade(c, n) => {
                let key = (c, n, Slot::ReadWrite);
                let is_writer = guards
                    .get(&key)
                    .is_some_and(|g| g.mode() == LockMode::Write);
                if !is_writer {
                    continue;
                }
                let g = guards.remove(&key).expect("checked above");
                let read = clients[c]
                    .downgrade(g)
                    .await
                    .map_err(|e| at(e.to_string()))?;
                if read.mode() != LockMode::Read {
                    return Err(at(format!("downgrade gave a {} guard", read.mode())));
                }
                let model = &mut models[n];
                model
                    .check_token(Slot::ReadWrite, read.fencing_token())
                    .map_err(at)?;
                model.writer = None;
                model.readers.insert(c);
                guards.insert(key, read);
            }
            Op::Remove(n) => {
                h.remove_behind_back(&names[n]).await;
                let held: Vec<(usize, usize, Slot)> =
                    guards.keys().filter(|k| k.1 == n).copied().collect();
                for key in held {
                    let g = guards.remove(&key).expect("listed above");
                    let was = g.release().await.map_err(|e| at(e.to_string()))?;
                    if was {
                        return Err(at("release after removal said still held".into()));
                    }
                    models[n].drop_lease(key.0, key.2);
                }
            }
        }
    }
    for (_, g) in guards.drain() {
        g.release().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The case: `h.model_cases()` random sequences of up to 16 operations on
/// the primitives the backend offers.
pub async fn run(h: Arc<dyn Harness>) {
    let caps = h.client().await.capabilities();
    let mut runner = TestRunner::new(Config::default());
    let strategy = ops(16, &caps);
    for case in 0..h.model_cases() {
        let seq = strategy.new_tree(&mut runner).expect("strategy").current();
        if let Err(msg) = check(&*h, &seq).await {
            panic!("sequence {case} disagrees with the model: {msg}\nsequence: {seq:?}");
        }
    }
}

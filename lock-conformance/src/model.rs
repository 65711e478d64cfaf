//! The model-based test: random operation sequences from several clients on a
//! few names, checked against a reference model of a lock service.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, FencingToken, LockGuard, LockName};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

use crate::{unique_name, Harness};

/// Clients in a sequence.
pub const CLIENTS: usize = 3;
/// Names in a sequence.
pub const NAMES: usize = 2;

/// One step of a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Client `c` tries to take name `n`.
    TryAcquire(usize, usize),
    /// Client `c` releases its guard on `n`, if it has one.
    Release(usize, usize),
    /// Client `c` extends its guard on `n`, if it has one.
    Extend(usize, usize),
    /// Name `n` is removed behind its holder's back; the holder's guard is then released.
    Remove(usize),
}

/// Sequences of 1 to `max_len` operations.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    let c = 0..CLIENTS;
    let n = 0..NAMES;
    let op = prop_oneof![
        3 => (c.clone(), n.clone()).prop_map(|(c, n)| Op::TryAcquire(c, n)),
        2 => (c.clone(), n.clone()).prop_map(|(c, n)| Op::Release(c, n)),
        1 => (c, n.clone()).prop_map(|(c, n)| Op::Extend(c, n)),
        1 => n.prop_map(Op::Remove),
    ];
    proptest::collection::vec(op, 1..=max_len)
}

/// Runs `ops` against fresh clients of `h` and the model; `Err` describes the
/// first disagreement.
pub async fn check(h: &dyn Harness, ops: &[Op]) -> Result<(), String> {
    let mut clients: Vec<Arc<dyn DistributedLock>> = Vec::new();
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
    let mut holder: [Option<usize>; NAMES] = [None; NAMES];
    let mut last_token: [Option<FencingToken>; NAMES] = [None; NAMES];
    let mut guards: HashMap<(usize, usize), LockGuard> = HashMap::new();

    for (step, op) in ops.iter().enumerate() {
        let at = |msg: String| format!("step {step} {op:?}: {msg}");
        match *op {
            Op::TryAcquire(c, n) => {
                if guards.contains_key(&(c, n)) {
                    continue; // a client re-taking its own lock is not in the model
                }
                let got = clients[c]
                    .try_acquire(&names[n], &o)
                    .await
                    .map_err(|e| at(e.to_string()))?;
                match (holder[n], got) {
                    (Some(other), Some(_)) => {
                        return Err(at(format!("granted while client {other} holds it")))
                    }
                    (Some(_), None) => {}
                    (None, None) => return Err(at("free lock not granted".into())),
                    (None, Some(g)) => {
                        if let Some(t) = g.fencing_token() {
                            if Some(t) <= last_token[n] {
                                return Err(at(format!("token {t} not above {:?}", last_token[n])));
                            }
                            last_token[n] = Some(t);
                        }
                        holder[n] = Some(c);
                        guards.insert((c, n), g);
                    }
                }
            }
            Op::Release(c, n) => {
                if let Some(g) = guards.remove(&(c, n)) {
                    let was = g.release().await.map_err(|e| at(e.to_string()))?;
                    if !was {
                        return Err(at("release of a held lock said not held".into()));
                    }
                    holder[n] = None;
                }
            }
            Op::Extend(c, n) => {
                if let Some(g) = guards.get(&(c, n)) {
                    g.extend(Duration::from_secs(60))
                        .await
                        .map_err(|e| at(e.to_string()))?;
                }
            }
            Op::Remove(n) => {
                h.remove_behind_back(&names[n]).await;
                if let Some(c) = holder[n].take() {
                    let g = guards.remove(&(c, n)).expect("model holder has a guard");
                    let was = g.release().await.map_err(|e| at(e.to_string()))?;
                    if was {
                        return Err(at("release after removal said still held".into()));
                    }
                }
            }
        }
    }
    for (_, g) in guards.drain() {
        g.release().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The case: `h.model_cases()` random sequences of up to 16 operations.
pub async fn run(h: Arc<dyn Harness>) {
    let mut runner = TestRunner::new(Config::default());
    let strategy = ops(16);
    for case in 0..h.model_cases() {
        let seq = strategy.new_tree(&mut runner).expect("strategy").current();
        if let Err(msg) = check(&*h, &seq).await {
            panic!("sequence {case} disagrees with the model: {msg}\nsequence: {seq:?}");
        }
    }
}

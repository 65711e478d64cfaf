//! The guard state machine, driven by a scripted lease (a unit test of the
//! core's keep-alive and loss logic; the backends' behaviour against real
//! servers is tested by the conformance suite).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lock_core::backend::{Lease, LeaseEvent, LeaseHandle, LeaseRequest, LockBackend, Renewal};
use lock_core::{
    async_trait, AcquireOptions, Capabilities, DistributedLock, GuardState, LockError,
    LockErrorKind, LockName, LockStatus, LossCause, Result,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the scripted lease answers to each renewal, in order.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Renew,
    Gone,
    Fail,
    Hang,
    /// Renewed after [`SLOW`].
    Slow,
}

/// How long a [`Answer::Slow`] renewal or a slow release takes.
const SLOW: Duration = Duration::from_millis(150);

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    renewals: AtomicUsize,
    releases: AtomicUsize,
    /// Releases that got to the end (a slow one can be cancelled first).
    releases_done: AtomicUsize,
    /// Releases take [`SLOW`].
    slow_release: std::sync::atomic::AtomicBool,
    events: Mutex<Option<mpsc::UnboundedSender<LeaseEvent>>>,
}

struct Scripted(Arc<Script>);

#[async_trait]
impl LeaseHandle for Scripted {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        self.0.renewals.fetch_add(1, Ordering::SeqCst);
        let answer = self
            .0
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Answer::Renew);
        match answer {
            Answer::Renew => Ok(Renewal::Renewed {
                valid_until: Instant::now() + ttl,
            }),
            Answer::Gone => Ok(Renewal::Gone),
            Answer::Fail => Err(LockError::unavailable("scripted connection error")),
            Answer::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Answer::Slow => {
                tokio::time::sleep(SLOW).await;
                Ok(Renewal::Renewed {
                    valid_until: Instant::now() + ttl,
                })
            }
        }
    }

    async fn release(&self) -> Result<bool> {
        self.0.releases.fetch_add(1, Ordering::SeqCst);
        if self.0.slow_release.load(Ordering::SeqCst) {
            tokio::time::sleep(SLOW).await;
        }
        self.0.releases_done.fetch_add(1, Ordering::SeqCst);
        Ok(true)
    }
}

struct OneLease(Arc<Script>);

#[async_trait]
impl LockBackend for OneLease {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("scripted")
    }
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.0.events.lock().unwrap() = Some(tx);
        let events =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        Ok(Some(
            Lease::new(Box::new(Scripted(self.0.clone())), Instant::now() + req.ttl)
                .with_events(events.boxed()),
        ))
    }
    async fn inspect(&self, _name: &LockName) -> Result<LockStatus> {
        Ok(LockStatus::new(false))
    }
}

fn setup(answers: &[Answer]) -> (Arc<Script>, OneLease) {
    let script = Arc::new(Script::default());
    script
        .answers
        .lock()
        .unwrap()
        .extend(answers.iter().copied());
    (script.clone(), OneLease(script))
}

fn name() -> LockName {
    LockName::new("scripted").unwrap()
}

const TTL: Duration = Duration::from_millis(300);

#[tokio::test]
async fn failed_renewal_suspends_then_validity_passing_loses() {
    let (script, backend) = setup(&[Answer::Fail; 40]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL))
        .await
        .unwrap();
    let mut states = g.subscribe();
    states
        .wait_for(|s| matches!(s, GuardState::Suspended { .. }))
        .await
        .unwrap();
    assert!(g.is_held(), "suspended but within validity counts as held");
    let cause = tokio::time::timeout(TTL * 2, g.lost()).await.unwrap();
    assert_eq!(cause, LossCause::Expired);
    assert!(!g.is_held());
    assert!(
        script.renewals.load(Ordering::SeqCst) >= 2,
        "retried sooner than the interval"
    );
    // The core cleans up server state once the lock is lost.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(script.releases.load(Ordering::SeqCst), 1);
    assert!(!g.release().await.unwrap());
    assert_eq!(
        script.releases.load(Ordering::SeqCst),
        1,
        "no second release"
    );
}

#[tokio::test]
async fn suspended_guard_recovers_on_successful_renewal() {
    let (_script, backend) = setup(&[Answer::Fail, Answer::Renew]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL))
        .await
        .unwrap();
    let mut states = g.subscribe();
    states
        .wait_for(|s| matches!(s, GuardState::Suspended { .. }))
        .await
        .unwrap();
    states
        .wait_for(|s| matches!(s, GuardState::Held { .. }))
        .await
        .unwrap();
    tokio::time::sleep(TTL * 2).await;
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "{:?}",
        g.state()
    );
    assert!(g.release().await.unwrap());
}

#[tokio::test]
async fn gone_on_renewal_loses_at_once() {
    let (_script, backend) = setup(&[Answer::Gone]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL))
        .await
        .unwrap();
    let started = Instant::now();
    let cause = g.lost().await;
    assert_eq!(cause, LossCause::NotOwner);
    assert!(
        started.elapsed() < TTL / 2 + Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn hanging_renewal_cannot_outlive_validity() {
    let (_script, backend) = setup(&[Answer::Hang]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL))
        .await
        .unwrap();
    let until = g.valid_until().unwrap();
    let cause = g.lost().await;
    assert_eq!(cause, LossCause::Expired);
    assert!(Instant::now() >= until);
    assert!(Instant::now() < until + Duration::from_millis(100));
}

#[tokio::test]
async fn backend_events_drive_the_state() {
    let (script, backend) = setup(&[]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL * 10))
        .await
        .unwrap();
    let tx = script.events.lock().unwrap().clone().unwrap();
    let mut states = g.subscribe();
    tx.send(LeaseEvent::Suspended {
        reason: "disconnected".into(),
    })
    .unwrap();
    states
        .wait_for(|s| matches!(s, GuardState::Suspended { .. }))
        .await
        .unwrap();
    let before = script.renewals.load(Ordering::SeqCst);
    tx.send(LeaseEvent::Resumed).unwrap();
    states
        .wait_for(|s| matches!(s, GuardState::Held { .. }))
        .await
        .unwrap();
    assert!(
        script.renewals.load(Ordering::SeqCst) > before,
        "resume confirms with a renewal"
    );
    tx.send(LeaseEvent::Lost(LossCause::SessionExpired))
        .unwrap();
    assert_eq!(g.lost().await, LossCause::SessionExpired);
    let err = g.extend(TTL).await.unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Lost);
}

#[tokio::test]
async fn keep_alive_off_means_one_ttl() {
    let (script, backend) = setup(&[]);
    let opts = AcquireOptions::new().ttl(TTL).keep_alive(false);
    let g = backend.acquire(&name(), &opts).await.unwrap();
    assert_eq!(g.lost().await, LossCause::Expired);
    assert_eq!(script.renewals.load(Ordering::SeqCst), 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        script.releases.load(Ordering::SeqCst),
        1,
        "expired lease cleaned up"
    );
}

#[tokio::test]
async fn dropping_the_guard_releases_in_the_background() {
    let (script, backend) = setup(&[]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL))
        .await
        .unwrap();
    drop(g);
    for _ in 0..50 {
        if script.releases.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("dropped guard never released");
}

#[tokio::test]
async fn a_release_cancelled_before_the_answer_still_releases() {
    let (script, backend) = setup(&[]);
    script.slow_release.store(true, Ordering::SeqCst);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    let states = g.subscribe();
    // The caller gives up on the release long before the server answers.
    let gave_up = tokio::time::timeout(Duration::from_millis(20), g.release()).await;
    assert!(gave_up.is_err(), "the release took {SLOW:?}");
    assert_eq!(*states.borrow(), GuardState::Released);
    // It goes on in the background all the same: the lock is not left to its TTL.
    let deadline = Instant::now() + SLOW * 4;
    while script.releases_done.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the cancelled release never completed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(SLOW * 2).await;
    assert_eq!(script.releases_done.load(Ordering::SeqCst), 1);
    assert_eq!(script.renewals.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_release_during_a_renewal_waits_for_it_and_releases_once() {
    let (script, backend) = setup(&[Answer::Slow]);
    let ttl = Duration::from_millis(600);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    // The first renewal starts at 1/4..1/3 of the TTL and takes SLOW.
    while script.renewals.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    assert!(
        g.release().await.unwrap(),
        "still ours: the renewal succeeded"
    );
    assert!(
        started.elapsed() >= SLOW / 2,
        "the release waited for the renewal in flight ({:?})",
        started.elapsed()
    );
    tokio::time::sleep(ttl).await;
    assert_eq!(script.releases.load(Ordering::SeqCst), 1);
    assert_eq!(
        script.renewals.load(Ordering::SeqCst),
        1,
        "no renewal after the release"
    );
}

#[tokio::test]
async fn extend_rejects_bad_ttl_and_moves_validity() {
    let (_script, backend) = setup(&[]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(TTL).keep_alive(false))
        .await
        .unwrap();
    assert_eq!(
        g.extend(Duration::ZERO).await.unwrap_err().kind(),
        LockErrorKind::InvalidArgument
    );
    let before = g.valid_until().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = g.extend(TTL * 4).await.unwrap();
    assert!(after > before + TTL);
    tokio::time::sleep(TTL * 2).await;
    assert!(g.is_held());
}

#[tokio::test]
async fn session_confirmations_cap_and_carry_validity() {
    let (script, backend) = setup(&[]);
    // Keep-alive off, a TTL far longer than the session's confirmations.
    let g = backend
        .acquire(
            &name(),
            &AcquireOptions::new().ttl(TTL * 10).keep_alive(false),
        )
        .await
        .unwrap();
    let own = g.valid_until().unwrap();
    let tx = script.events.lock().unwrap().clone().unwrap();
    let mut states = g.subscribe();
    // The session vouches only for a short while: the guard's validity shrinks to it.
    let session = Instant::now() + TTL;
    tx.send(LeaseEvent::Confirmed {
        valid_until: session,
    })
    .unwrap();
    states
        .wait_for(|s| s.valid_until() == Some(session))
        .await
        .unwrap();
    // Without further confirmation the guard is lost at the session's bound, not its own.
    tx.send(LeaseEvent::Suspended {
        reason: "keep-alive failing".into(),
    })
    .unwrap();
    let cause = tokio::time::timeout(TTL * 2, g.lost())
        .await
        .expect("lost at the session bound");
    assert_eq!(cause, LossCause::Expired);
    assert!(Instant::now() < own);
}

#[tokio::test]
async fn confirmations_keep_a_keep_alive_off_guard_for_its_own_ttl() {
    let (script, backend) = setup(&[]);
    let g = backend
        .acquire(
            &name(),
            &AcquireOptions::new().ttl(TTL * 3).keep_alive(false),
        )
        .await
        .unwrap();
    let own = g.valid_until().unwrap();
    let tx = script.events.lock().unwrap().clone().unwrap();
    // A session confirming every TTL/3 for TTL/3 * 2 ahead: the guard lives on to its own TTL.
    let pump = tokio::spawn(async move {
        loop {
            if tx
                .send(LeaseEvent::Confirmed {
                    valid_until: Instant::now() + TTL * 2 / 3,
                })
                .is_err()
            {
                return;
            }
            tokio::time::sleep(TTL / 3).await;
        }
    });
    tokio::time::sleep(TTL * 2).await;
    assert!(g.is_held(), "{:?}", g.state());
    assert_eq!(g.lost().await, LossCause::Expired);
    assert!(Instant::now() >= own);
    assert_eq!(script.renewals.load(Ordering::SeqCst), 0);
    pump.abort();
}

/// An extend to a SHORTER ttl whose reply is lost may have been applied by
/// the server: the guard must not keep its old, longer validity.
#[tokio::test]
async fn unanswered_extend_to_shorter_ttl_caps_validity() {
    let (_script, backend) = setup(&[Answer::Fail]);
    let g = backend
        .acquire(
            &name(),
            &AcquireOptions::new()
                .ttl(Duration::from_secs(30))
                .keep_alive(false),
        )
        .await
        .unwrap();
    let before = Instant::now();
    let short = Duration::from_millis(200);
    let err = g.extend(short).await.unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Unavailable);
    let until = g.valid_until().expect("still within the shorter validity");
    assert!(
        until <= before + short + Duration::from_millis(20),
        "validity {:?} after the request, longer than the {short:?} the server may have set",
        until - before
    );
    assert!(
        matches!(g.state(), GuardState::Suspended { .. }),
        "{:?}",
        g.state()
    );
    let cause = tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .expect("lost once the shorter ttl ran out");
    assert_eq!(cause, LossCause::Expired);
}

/// A renewal that fails with the SAME ttl changes nothing but the state.
#[tokio::test]
async fn failed_keep_alive_keeps_its_validity() {
    let (_script, backend) = setup(&[Answer::Fail]);
    let g = backend
        .acquire(&name(), &AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .unwrap();
    let until = g.valid_until().unwrap();
    let mut states = g.subscribe();
    states
        .wait_for(|s| matches!(s, GuardState::Suspended { .. }))
        .await
        .unwrap();
    assert_eq!(g.valid_until(), Some(until));
}

/// A backend whose grant arrives after the lease's validity already passed.
struct LateGrant(Arc<Script>);

#[async_trait]
impl LockBackend for LateGrant {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("late")
    }
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        tokio::time::sleep(req.ttl + Duration::from_millis(5)).await;
        Ok(Some(Lease::new(
            Box::new(Scripted(self.0.clone())),
            lock_core::backend::validity(sent, req.ttl),
        )))
    }
    async fn inspect(&self, _name: &LockName) -> Result<LockStatus> {
        Ok(LockStatus::new(false))
    }
}

/// No guard is ever born lost: a grant past its validity is released and
/// reported as a retryable error.
#[tokio::test]
async fn grant_past_its_validity_is_an_error_not_a_lost_guard() {
    let script = Arc::new(Script::default());
    let backend = LateGrant(script.clone());
    let err = backend
        .try_acquire(
            &name(),
            &AcquireOptions::new().ttl(Duration::from_millis(20)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        script.releases.load(Ordering::SeqCst),
        1,
        "the late lease is released"
    );
}

/// A TTL too short for any validity is refused with the minimum.
#[tokio::test]
async fn too_short_ttl_names_the_minimum() {
    let (_script, backend) = setup(&[]);
    let err = backend
        .try_acquire(
            &name(),
            &AcquireOptions::new().ttl(Duration::from_millis(2)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert!(err.to_string().contains("minimum is 10ms"), "{err}");
    assert!(LeaseRequest::new(name(), Duration::from_millis(2)).is_err());
    assert!(LeaseRequest::new(name(), Duration::MAX).is_err());
}

//! Taking the locks of `distlock run`: one or several names, as mutexes,
//! read or write sides, or permits, all through lock-core's `acquire_all`
//! (one global order, all or nothing).

use std::sync::Mutex;

use distlock::{
    async_trait, AcquireOptions, Capabilities, DistributedLock, DistributedLockExt, ForceReleased,
    LockError, LockErrorKind, LockGuard, LockMode, LockName, LockService, LockStatus, MultiGuard,
    Result,
};

use crate::args::Wait;

/// Why the locks were not taken.
#[derive(Debug)]
pub enum NotTaken {
    /// `name` is held by someone else (after the wait, if any).
    Held {
        /// The first name found held.
        name: Option<LockName>,
    },
    /// Taking `name` failed.
    Failed {
        /// The name whose acquisition failed (`None`: the set itself was refused).
        name: Option<LockName>,
        /// What went wrong.
        kind: LockErrorKind,
        /// The whole error, in words.
        message: String,
    },
}

/// Takes every name of `names` in `mode`, waiting as `wait` says: all of
/// them, or none (what was taken is released before this returns).
pub async fn take(
    locks: &dyn LockService,
    mode: LockMode,
    names: &[LockName],
    opts: &AcquireOptions,
    wait: Wait,
) -> std::result::Result<MultiGuard, NotTaken> {
    let side = Side {
        locks,
        mode,
        failed: Mutex::new(None),
    };
    let result = match wait {
        Wait::For(wait) => side.acquire_all(names, &opts.clone().wait(wait)).await,
        Wait::Forever => side.acquire_all(names, &opts.clone().wait_forever()).await,
    };
    result.map_err(|err| side.explain(err))
}

/// A view of `locks` whose mutex is the primitive `mode` names, so that
/// `acquire_all` takes read sides, write sides or permits in its order. It
/// remembers the member whose acquisition failed, for the message.
struct Side<'a> {
    locks: &'a dyn LockService,
    mode: LockMode,
    failed: Mutex<Option<(LockName, LockErrorKind, String)>>,
}

impl Side<'_> {
    fn remember(&self, name: &LockName, err: &LockError) {
        if let Ok(mut failed) = self.failed.lock() {
            *failed = Some((name.clone(), err.kind(), err.to_string()));
        }
    }

    /// What `acquire_all`'s `err` means, with the member that caused it.
    fn explain(&self, err: LockError) -> NotTaken {
        let failed = self.failed.lock().ok().and_then(|mut f| f.take());
        let (name, kind, message) = match failed {
            Some((name, kind, message)) => (Some(name), kind, message),
            // Refused before any member was tried (duplicate names, options).
            None => (None, err.kind(), err.to_string()),
        };
        match kind {
            LockErrorKind::Timeout => NotTaken::Held { name },
            _ => NotTaken::Failed {
                name,
                kind,
                message,
            },
        }
    }
}

#[async_trait]
impl DistributedLock for Side<'_> {
    fn capabilities(&self) -> Capabilities {
        self.locks.capabilities()
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        let locks = self.locks;
        match self.mode {
            LockMode::Read => locks.try_acquire_read(name, opts).await,
            LockMode::Write => locks.try_acquire_write(name, opts).await,
            LockMode::Permit { permits } => locks.try_acquire_permit(name, permits, opts).await,
            _ => locks.try_acquire(name, opts).await,
        }
    }

    /// A zero wait is one attempt (`try_*`), as `distlock run` without `--wait` means.
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard> {
        let locks = self.locks;
        let result = if opts.wait_value().is_zero() {
            match self.try_acquire(name, opts).await {
                Ok(Some(guard)) => Ok(guard),
                Ok(None) => Err(LockError::new(
                    LockErrorKind::Timeout,
                    format!("lock {name} is held by another owner"),
                )),
                Err(err) => Err(err),
            }
        } else {
            match self.mode {
                LockMode::Read => locks.acquire_read(name, opts).await,
                LockMode::Write => locks.acquire_write(name, opts).await,
                LockMode::Permit { permits } => locks.acquire_permit(name, permits, opts).await,
                _ => locks.acquire(name, opts).await,
            }
        };
        if let Err(err) = &result {
            self.remember(name, err);
        }
        result
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        self.locks.inspect(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        self.locks.list(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        self.locks.force_release(name).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use distlock::MemoryLock;

    use super::*;

    fn n(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    fn opts() -> AcquireOptions {
        AcquireOptions::new().ttl(Duration::from_secs(5))
    }

    #[tokio::test]
    async fn takes_every_mode_in_sorted_order() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let names = [n("b"), n("a")];
        for mode in [
            LockMode::Exclusive,
            LockMode::Read,
            LockMode::Write,
            LockMode::Permit { permits: 2 },
        ] {
            let all = take(&*locks, mode, &names, &opts(), Wait::For(Duration::ZERO))
                .await
                .unwrap();
            let taken: Vec<_> = all.names().map(|n| n.as_str().to_string()).collect();
            assert_eq!(taken, ["a", "b"], "{mode}");
            assert!(all.guards().iter().all(|g| g.mode() == mode), "{mode}");
            assert!(all.release().await.unwrap());
        }
    }

    #[tokio::test]
    async fn names_the_held_member_and_releases_the_others() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let held = locks.acquire(&n("b"), &opts()).await.unwrap();
        let names = [n("a"), n("b"), n("c")];
        match take(
            &*locks,
            LockMode::Exclusive,
            &names,
            &opts(),
            Wait::For(Duration::from_millis(50)),
        )
        .await
        {
            Err(NotTaken::Held { name }) => assert_eq!(name, Some(n("b"))),
            other => panic!("expected Held(b), got {other:?}"),
        }
        // "a" was released again: it can be taken at once.
        let a = locks.try_acquire(&n("a"), &opts()).await.unwrap();
        assert!(
            a.is_some(),
            "the member taken before the conflict is released"
        );
        held.release().await.unwrap();
    }

    #[tokio::test]
    async fn readers_share_and_a_writer_waits() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let names = [n("shared")];
        let once = Wait::For(Duration::ZERO);
        let r1 = take(&*locks, LockMode::Read, &names, &opts(), once)
            .await
            .unwrap();
        let r2 = take(&*locks, LockMode::Read, &names, &opts(), once)
            .await
            .unwrap();
        assert!(matches!(
            take(&*locks, LockMode::Write, &names, &opts(), once).await,
            Err(NotTaken::Held { .. })
        ));
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w = take(&*locks, LockMode::Write, &names, &opts(), once)
            .await
            .unwrap();
        w.release().await.unwrap();
    }

    #[tokio::test]
    async fn forever_waits_past_a_release() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let held = locks.acquire(&n("standby"), &opts()).await.unwrap();
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                take(
                    &*locks,
                    LockMode::Exclusive,
                    &[n("standby")],
                    &opts(),
                    Wait::Forever,
                )
                .await
                .map(|all| all.names().count())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        held.release().await.unwrap();
        assert_eq!(waiter.await.unwrap().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_failure_names_its_member() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        match take(
            &*locks,
            LockMode::Permit { permits: 0 },
            &[n("p")],
            &opts(),
            Wait::For(Duration::ZERO),
        )
        .await
        {
            Err(NotTaken::Failed { name, kind, .. }) => {
                assert_eq!(name, Some(n("p")));
                assert_eq!(kind, LockErrorKind::InvalidArgument);
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

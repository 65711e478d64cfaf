//! Leader election: [`LeaderElection`] (campaign, and the followers'
//! `leader` and `observe`), the term a campaign wins ([`Leadership`]) and
//! [`LeaderElectionExt::with_leadership`].
//!
//! An election of a name is a line of candidates like a mutex's: the first
//! holds the term, the others wait in order, and a term ends when its
//! leader resigns, or its lease or session ends. What the election adds to
//! a mutex is the leader's published value, which followers read and watch,
//! and the term's epoch: its fencing token, strictly above every earlier
//! term's, for the stores a leader writes to.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument;

use crate::acquire::{grant_as, granted, Proposal};
use crate::backend::{LeaderStream, LockBackend};
use crate::capabilities::Capabilities;
use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::GuardView;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::{AcquireOptions, KeepAlive, MAX_TTL};
use crate::section::run_section;

pub(crate) mod info;
mod leadership;

pub use info::{LeaderInfo, MAX_LEADER_VALUE_LEN};
pub use leadership::Leadership;

/// How a candidate campaigns: its term's lease, how long it waits to lead,
/// and its lock-delay.
///
/// ```
/// use std::time::Duration;
/// use lock_core::CampaignOptions;
/// let opts = CampaignOptions::new()
///     .ttl(Duration::from_secs(10))
///     .lock_delay(Duration::from_secs(5));
/// assert!(opts.waits_forever());
/// assert_eq!(opts.lock_delay_value(), Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CampaignOptions {
    acquire: AcquireOptions,
    lock_delay: Duration,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        Self {
            acquire: AcquireOptions::new().wait_forever().retry_errors(true),
            lock_delay: Duration::ZERO,
        }
    }
}

impl CampaignOptions {
    /// Defaults: a term's lease of 30 s kept alive every 10 s, waiting to
    /// lead however long it takes, riding out the server's retryable errors
    /// (a restart, a failover) while waiting, no lock-delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease of the term: how long leadership outlives a leader that
    /// stops renewing (crash, pause, partition); see
    /// [`AcquireOptions::ttl`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.acquire = self.acquire.ttl(ttl);
        self
    }

    /// How long [`LeaderElection::campaign`] waits to lead before a
    /// [`LockErrorKind::Timeout`] error (default: forever); see
    /// [`AcquireOptions::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.acquire = self.acquire.wait(wait);
        self
    }

    /// Whether the campaign waits until it leads, however long.
    pub fn waits_forever(&self) -> bool {
        self.acquire.waits_forever()
    }

    /// Whether the campaign rides out retryable errors while it waits
    /// (default: yes); see [`AcquireOptions::retry_errors`].
    pub fn retry_errors(mut self, on: bool) -> Self {
        self.acquire = self.acquire.retry_errors(on);
        self
    }

    /// Keeps the term's lease alive while the [`Leadership`] lives (default:
    /// on, every TTL/3); see [`AcquireOptions::keep_alive`].
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.acquire = self.acquire.keep_alive(on);
        self
    }

    /// The lock-delay (Chubby's): when a term ends without its leader
    /// resigning (its lease or session expired: a crash, a pause, a
    /// partition), no new term starts until this long after the end, so
    /// that what the old leader still sends drains before a new leader
    /// acts, for systems that cannot check epochs. A resignation starts the
    /// next term at once. At most [`MAX_TTL`]; default none.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// The lock-delay (see [`CampaignOptions::lock_delay`]).
    pub fn lock_delay_value(&self) -> Duration {
        self.lock_delay
    }

    /// The options of the term's lease, as an acquire's.
    pub fn acquire_options(&self) -> &AcquireOptions {
        &self.acquire
    }

    /// Whether keep-alive renews the term's lease.
    pub fn keep_alive_value(&self) -> KeepAlive {
        self.acquire.keep_alive_value()
    }
}

/// A campaign with the options of an acquire (its TTL, wait, keep-alive,
/// retries and note), without a lock-delay.
impl From<AcquireOptions> for CampaignOptions {
    fn from(acquire: AcquireOptions) -> Self {
        Self {
            acquire,
            lock_delay: Duration::ZERO,
        }
    }
}

/// Leader election on a backend: candidates campaign on a name, one leads
/// at a time (the others wait in line), and followers read and watch who
/// leads. Object safe, and part of [`crate::LockService`]; offered where
/// [`Capabilities::election`] says so (an `Unsupported` error elsewhere).
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use futures::StreamExt;
/// use lock_core::{CampaignOptions, LeaderElection, LockName, MemoryLock};
/// let service = MemoryLock::new();
/// let name = LockName::new("scheduler")?;
/// let mut followers = service.observe(&name).await?;
/// assert_eq!(followers.next().await.transpose()?, Some(None)); // nobody leads yet
///
/// let term = service.campaign(&name, "10.0.0.7:8080", &CampaignOptions::new()).await?;
/// let seen = followers.next().await.transpose()?.flatten().expect("a leader");
/// assert_eq!(seen.value, "10.0.0.7:8080");
/// assert_eq!(seen.epoch, term.epoch());
///
/// term.proclaim("10.0.0.7:9090").await?;
/// assert_eq!(service.leader(&name).await?.map(|l| l.value).as_deref(), Some("10.0.0.7:9090"));
/// term.resign().await?;
/// assert_eq!(service.leader(&name).await?, None);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait LeaderElection: Send + Sync {
    /// Campaigns for the election `name`, publishing `value` (at most
    /// [`MAX_LEADER_VALUE_LEN`] bytes), and returns once this candidate
    /// leads: the term's [`Leadership`], whose epoch is strictly above every
    /// earlier term's. Candidates lead in the order they started to
    /// campaign where the backend is FIFO. Dropping the future withdraws
    /// the candidacy and leaves nothing on the server.
    async fn campaign(
        &self,
        name: &LockName,
        value: &str,
        opts: &CampaignOptions,
    ) -> Result<Leadership>;

    /// Who leads the election `name` now, as the server says (`None`: no
    /// term runs).
    async fn leader(&self, name: &LockName) -> Result<Option<crate::LeaderInfo>>;

    /// Who leads the election `name`, as it changes: first who leads now,
    /// then every change (a new term, a proclaimed value, nobody leading),
    /// pushed by the server. An error item ends the stream (the backend
    /// lost the election's trail: observe again).
    async fn observe(&self, name: &LockName) -> Result<LeaderStream>;
}

#[async_trait]
impl<B: LockBackend> LeaderElection for B {
    async fn campaign(
        &self,
        name: &LockName,
        value: &str,
        opts: &CampaignOptions,
    ) -> Result<Leadership> {
        crate::options::check_duration("lock_delay", opts.lock_delay, Duration::ZERO, MAX_TTL)?;
        let proposal = Proposal {
            value,
            lock_delay: opts.lock_delay,
        };
        let outcome = grant_as(
            self,
            name,
            &opts.acquire,
            LockMode::Leader,
            true,
            Some(proposal),
        )
        .await;
        let guard = granted(name, &opts.acquire, outcome)?;
        Ok(Leadership::new(guard, value.to_string()))
    }

    async fn leader(&self, name: &LockName) -> Result<Option<crate::LeaderInfo>> {
        let caps = self.backend_capabilities();
        offers_elections(&caps)?;
        let span = tracing::debug_span!("distlock.leader", backend = caps.backend, name = %name);
        LockBackend::leader(self, name).instrument(span).await
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let caps = self.backend_capabilities();
        offers_elections(&caps)?;
        let span = tracing::debug_span!("distlock.observe", backend = caps.backend, name = %name);
        LockBackend::observe(self, name).instrument(span).await
    }
}

/// The `Unsupported` error of a backend without elections.
fn offers_elections(caps: &Capabilities) -> Result<()> {
    if caps.election {
        return Ok(());
    }
    Err(LockError::new(
        LockErrorKind::Unsupported,
        format!(
            "the {} backend has no leader elections (see its capabilities)",
            caps.backend
        ),
    ))
}

/// What every [`LeaderElection`] gets for free.
pub trait LeaderElectionExt: LeaderElection {
    /// Campaigns for `name` with `value`, runs `section` while this
    /// candidate leads, then resigns. The section gets the term's view
    /// (its epoch is [`GuardView::fencing_token`]); it is stopped (its
    /// future dropped) as soon as leadership is lost, and the call then
    /// fails with [`LockErrorKind::Lost`].
    fn with_leadership<F, Fut, T>(
        &self,
        name: &LockName,
        value: &str,
        opts: &CampaignOptions,
        section: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(GuardView) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let term = self.campaign(name, value, opts).await?;
            run_section(term.into_guard(), section).await
        }
    }
}

impl<L: LeaderElection + ?Sized> LeaderElectionExt for L {}

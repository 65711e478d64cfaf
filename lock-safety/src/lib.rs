//! # lock-safety: Kleppmann's scenarios as tests, with a checker and a report
//!
//! A lease is not a mutex. This crate measures what each backend guarantees
//! under pauses, crashes, delays and partitions, and shows that fencing tokens
//! stop stale writes.
//!
//! - [`Workload`]: two shared registers that lock holders read-modify-write:
//!   a *fenced* register (the `lock-core` [`FencedRegister`]: rejects a write
//!   whose token is lower than the highest it accepted) and a *plain* one (no
//!   check). Every critical section is recorded on one monotonic clock.
//! - The checker: [`Workload::stats`] counts overlapping critical sections
//!   (two holders at once where the lock's kind forbids it: any two of a
//!   mutex, a writer with anyone on a read-write lock, more than N on a
//!   semaphore of N permits), the same among sections whose guard still said
//!   *held* when they ended (*conflicts while held*: the lock itself broke
//!   its promise, not just a paused holder that ignored its guard), and
//!   *stale writes accepted*: writes the fenced
//!   register accepted from a holder after a later holder had already
//!   claimed it. Later means granted later, which the checker knows for
//!   certain when that holder asked for the lock only after this one had
//!   entered its section (the order of entering alone can be wrong: a holder
//!   that learns of its grant late enters after the next one). With correct,
//!   strictly increasing tokens that number is zero whatever the lock does;
//!   it becomes non-zero when tokens go backwards (e.g. a counter reset by a
//!   restart without persistence).
//! - [`Report`]: backend x scenario rows, printed as a Markdown table and
//!   written as JSON under `target/`.
//! - [`Workload::in_postgres`]: the same workload with the fenced register
//!   kept in a real PostgreSQL ([`PgRegisters`]), every write checked by
//!   `lock-fence`'s [`PgFence`](lock_fence::PgFence) in its own transaction:
//!   fencing end to end, into storage.
#![deny(missing_docs)]

pub mod fixture;
pub mod nemesis;
mod postgres;

pub use postgres::PgRegisters;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{FencedRegister, FencingToken, LockGuard, LockMode};
use tokio::time::Instant;

/// The fenced register's contents.
#[derive(Clone, Copy, Debug, Default)]
struct FencedCell {
    value: u64,
}

/// One finished critical section.
#[derive(Clone, Copy, Debug)]
struct SectionRecord {
    enter: Instant,
    exit: Instant,
    mode: LockMode,
    /// Whether the guard still said held when the section ended; `None`
    /// when the scenario did not ask ([`Section::exit`]).
    held_throughout: Option<bool>,
}

impl SectionRecord {
    /// Whether `self`, entering while `active` run, breaks the lock's
    /// promise (for a semaphore: whether `active` already fill its permits).
    fn conflicts(&self, active: &[&SectionRecord]) -> bool {
        match self.mode {
            LockMode::Read => active.iter().any(|a| a.mode != LockMode::Read),
            LockMode::Permit { permits } => active.len() >= permits as usize,
            _ => !active.is_empty(),
        }
    }
}

/// Sections (of one name and one kind of lock) that began while sections
/// they conflict with were running.
fn count_conflicts(mut sections: Vec<SectionRecord>) -> u64 {
    sections.sort_by_key(|s| s.enter);
    let mut conflicts = 0;
    for (i, s) in sections.iter().enumerate() {
        let active: Vec<&SectionRecord> = sections[..i]
            .iter()
            .filter(|a| a.exit > s.enter && same_kind(a.mode, s.mode))
            .collect();
        if s.conflicts(&active) {
            conflicts += 1;
        }
    }
    conflicts
}

/// A mutex, a read-write lock, a semaphore and an election on one name are
/// different locks.
fn same_kind(a: LockMode, b: LockMode) -> bool {
    let kind = |m: LockMode| match m {
        LockMode::Read | LockMode::Write => 1,
        LockMode::Permit { .. } => 2,
        LockMode::Leader => 3,
        _ => 0,
    };
    kind(a) == kind(b)
}

/// The registers and records of one lock name.
#[derive(Debug)]
struct PerName {
    name: String,
    fenced: FencedRegister<FencedCell>,
    /// Where the fenced register lives when not in memory.
    store: Option<Arc<PgRegisters>>,
    /// Writes the store refused as stale.
    store_rejections: AtomicU64,
    plain: Mutex<u64>,
    /// Sections entered (the acquisitions that reported held).
    grants: AtomicU64,
    /// The latest moment a holder whose claim the register has decided
    /// (admitted or refused) asked for the lock, and that holder's token.
    claimed: Mutex<Option<(Instant, Option<FencingToken>)>>,
    /// Makes a claim in memory one step: its write and its decision
    /// happen while no other fenced write of this name can.
    order: Mutex<()>,
    stale_accepted: AtomicU64,
    fenced_writes: AtomicU64,
    plain_writes: AtomicU64,
    sections: Mutex<Vec<SectionRecord>>,
}

impl PerName {
    fn new(name: &str, store: Option<Arc<PgRegisters>>) -> Self {
        Self {
            name: name.to_string(),
            fenced: FencedRegister::new(FencedCell::default()),
            store,
            store_rejections: AtomicU64::new(0),
            plain: Mutex::new(0),
            grants: AtomicU64::new(0),
            claimed: Mutex::new(None),
            order: Mutex::new(()),
            stale_accepted: AtomicU64::new(0),
            fenced_writes: AtomicU64::new(0),
            plain_writes: AtomicU64::new(0),
            sections: Mutex::new(Vec::new()),
        }
    }

    /// Notes that the register decided the claim of a holder that asked
    /// for the lock at `asked` with `token`.
    fn claim_decided(&self, asked: Instant, token: Option<FencingToken>) {
        let mut claimed = lock(&self.claimed);
        if claimed.is_none_or(|(latest, _)| latest < asked) {
            *claimed = Some((asked, token));
        }
    }

    /// The claim of the holder that asked for the lock at `asked` and
    /// entered its section at `entered`: its first fenced write (when it
    /// has a token), after which an older holder's accepted write is stale.
    ///
    /// In memory the write and the decision are one step, so an older
    /// holder's write counts as stale exactly when the register took it
    /// after the claim: a write that landed between the decision and the
    /// claim's own write was not stale (the register had not heard of the
    /// later holder), and counting it was a false alarm of the checker. In
    /// PostgreSQL the claim counts once the store has decided on it (see
    /// `postgres.rs`).
    fn claim(&self, entered: Instant, asked: Instant, token: Option<FencingToken>) {
        let _one_step = self.store.is_none().then(|| lock(&self.order));
        if let Some(token) = token {
            let _ = self.write_fenced(entered, token, None);
        }
        self.claim_decided(asked, token);
    }

    /// A fenced write of `value` by the holder whose section began at
    /// `entered`; `true` when accepted.
    fn fenced_write(&self, entered: Instant, token: FencingToken, value: Option<u64>) -> bool {
        let _one_step = self.store.is_none().then(|| lock(&self.order));
        self.write_fenced(entered, token, value)
    }

    /// [`PerName::fenced_write`] (`value` `None`: the claim, which changes
    /// nothing), without taking `order`.
    fn write_fenced(&self, entered: Instant, token: FencingToken, value: Option<u64>) -> bool {
        self.fenced_writes.fetch_add(1, Ordering::SeqCst);
        let stale = || {
            // Accepted. Had a holder that asked for the lock only after this
            // one held it (so was granted it later, whatever its token)
            // already claimed the register? Then this write is stale.
            let claimed = *lock(&self.claimed);
            if let Some((asked, later)) = claimed.filter(|(asked, _)| *asked > entered) {
                self.stale_accepted.fetch_add(1, Ordering::SeqCst);
                eprintln!(
                    "stale write accepted on {}: token {} of a holder that entered {:?} before \
                     a holder that asked later claimed the register with token {:?}",
                    self.name,
                    token.get(),
                    asked - entered,
                    later.map(FencingToken::get),
                );
            }
        };
        if let Some(store) = &self.store {
            let admitted = blocking(store.write(&self.name, token, value, stale));
            if !admitted {
                self.store_rejections.fetch_add(1, Ordering::SeqCst);
            }
            return admitted;
        }
        self.fenced
            .write(token, |cell| {
                stale();
                if let Some(v) = value {
                    cell.value = v;
                }
            })
            .is_ok()
    }

    fn read_fenced(&self) -> u64 {
        match &self.store {
            Some(store) => blocking(store.read(&self.name)),
            None => self.fenced.read().value,
        }
    }

    /// Sections that began while a section they conflict with was running.
    fn overlaps(&self) -> u64 {
        count_conflicts(lock(&self.sections).clone())
    }

    /// The same, among the sections whose guard said held to the end.
    fn conflicts_while_held(&self) -> u64 {
        let held = lock(&self.sections)
            .iter()
            .filter(|s| s.held_throughout == Some(true))
            .copied()
            .collect();
        count_conflicts(held)
    }

    /// Sections whose end asked the guard ([`Section::exit_checked`]).
    fn checked_sections(&self) -> u64 {
        lock(&self.sections)
            .iter()
            .filter(|s| s.held_throughout.is_some())
            .count() as u64
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs a store call to completion from synchronous checker code. The
/// scenarios run on a multi-threaded runtime, whose other workers keep
/// serving while this one waits.
fn blocking<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// Shared state of one scenario run: per lock name, the two registers and
/// the checker's records; plus fault and retake counts.
#[derive(Debug, Default)]
pub struct Workload {
    names: Mutex<HashMap<String, Arc<PerName>>>,
    faults: AtomicU64,
    retakes: Mutex<Vec<Duration>>,
    store: Option<Arc<PgRegisters>>,
}

impl Workload {
    /// Empty registers, no records.
    pub fn new() -> Self {
        Self::default()
    }

    /// Like [`Workload::new`], with the fenced register of every lock name
    /// in PostgreSQL: reads and writes go to `store` (each write a fenced
    /// transaction). Needs a multi-threaded tokio runtime.
    pub fn in_postgres(store: PgRegisters) -> Self {
        Self {
            store: Some(Arc::new(store)),
            ..Self::default()
        }
    }

    /// Enters a critical section for `guard`, which the acquire called at
    /// `asked` returned: counts the acquisition and claims the fenced
    /// register with the guard's token (the "first write with the new token"
    /// that makes older holders stale).
    ///
    /// `asked` orders holders the way the lock granted them, which the order
    /// of entering does not: a holder that learns of its grant late enters
    /// after a later holder. A holder that asked for the lock after another
    /// had entered its section was certainly granted it after that one.
    ///
    /// A read guard or a permit of a semaphore does not claim the register
    /// and its section does not write (readers share the lock, holders of
    /// permits share it too); only mutex and write guards write, fenced.
    pub fn enter(&self, guard: &LockGuard, asked: Instant) -> Section {
        self.enter_as(
            guard.name().as_str(),
            guard.fencing_token(),
            guard.mode(),
            asked,
        )
    }

    /// Like [`Workload::enter`], for the register `resource` instead of the
    /// one named after the lock: the mutex, the read-write lock and the
    /// semaphore of one name are different locks whose tokens need not be
    /// comparable, so each can protect a register of its own.
    pub fn enter_resource(&self, resource: &str, guard: &LockGuard, asked: Instant) -> Section {
        self.enter_as(resource, guard.fencing_token(), guard.mode(), asked)
    }

    /// Like [`Workload::enter`], from a lock name and a token, for a mutex
    /// granted just now (asked for after every section already entered).
    pub fn enter_with(&self, name: &str, token: Option<FencingToken>) -> Section {
        self.enter_as(name, token, LockMode::Exclusive, Instant::now())
    }

    fn enter_as(
        &self,
        name: &str,
        token: Option<FencingToken>,
        mode: LockMode,
        asked: Instant,
    ) -> Section {
        let writes = matches!(
            mode,
            LockMode::Exclusive | LockMode::Write | LockMode::Leader
        );
        let token = token.filter(|_| writes);
        let per = lock(&self.names)
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(PerName::new(name, self.store.clone())))
            .clone();
        per.grants.fetch_add(1, Ordering::SeqCst);
        let enter = Instant::now();
        per.claim(enter, asked, token);
        Section {
            per,
            token,
            mode,
            writes,
            enter,
            read_plain: 0,
            read_fenced: 0,
        }
    }

    /// Counts one injected fault.
    pub fn fault(&self) {
        self.faults.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts `n` injected faults.
    pub fn faults(&self, n: u64) {
        self.faults.fetch_add(n, Ordering::SeqCst);
    }

    /// Records how long the lock took to be retaken after its holder crashed.
    pub fn retake(&self, took: Duration) {
        lock(&self.retakes).push(took);
    }

    /// What the checker found so far, summed over lock names.
    pub fn stats(&self) -> Stats {
        let names: Vec<Arc<PerName>> = lock(&self.names).values().cloned().collect();
        let mut retakes = lock(&self.retakes).clone();
        retakes.sort();
        let mut stats = Stats {
            faults: self.faults.load(Ordering::SeqCst),
            retake_p50: percentile(&retakes, 0.50),
            retake_p99: percentile(&retakes, 0.99),
            retakes: retakes.len() as u64,
            ..Stats::default()
        };
        for per in names {
            let plain_writes = per.plain_writes.load(Ordering::SeqCst);
            let plain_value = *lock(&per.plain);
            stats.acquisitions += per.grants.load(Ordering::SeqCst);
            stats.sections += lock(&per.sections).len() as u64;
            stats.overlaps += per.overlaps();
            stats.conflicts_while_held += per.conflicts_while_held();
            stats.checked_sections += per.checked_sections();
            stats.stale_accepted += per.stale_accepted.load(Ordering::SeqCst);
            stats.stale_rejected +=
                per.fenced.rejections() + per.store_rejections.load(Ordering::SeqCst);
            stats.fenced_writes += per.fenced_writes.load(Ordering::SeqCst);
            stats.lost_updates += plain_writes.saturating_sub(plain_value);
        }
        stats
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64 - 1.0) * q).ceil() as usize;
    Some(sorted[idx.min(sorted.len() - 1)])
}

/// A critical section in progress: read both registers, (maybe be paused),
/// write both back incremented, exit.
#[derive(Debug)]
pub struct Section {
    per: Arc<PerName>,
    token: Option<FencingToken>,
    mode: LockMode,
    /// Whether this kind of holder writes (mutex and write guards).
    writes: bool,
    enter: Instant,
    read_plain: u64,
    read_fenced: u64,
}

impl Section {
    /// Reads both registers.
    pub fn read(&mut self) {
        self.read_plain = *lock(&self.per.plain);
        self.read_fenced = self.per.read_fenced();
    }

    /// Writes both registers: `read + 1`. The fenced write carries the token
    /// (skipped when the backend has none). Returns whether the fenced write
    /// was accepted (`None` without a token, and for readers and permit
    /// holders, which do not write).
    pub fn write(&mut self) -> Option<bool> {
        if !self.writes {
            return None;
        }
        *lock(&self.per.plain) = self.read_plain + 1;
        self.per.plain_writes.fetch_add(1, Ordering::SeqCst);
        let value = self.read_fenced + 1;
        self.token
            .map(|token| self.per.fenced_write(self.enter, token, Some(value)))
    }

    /// Read, yield to other tasks (a real `.await` inside the section), write.
    pub async fn read_modify_write(&mut self) -> Option<bool> {
        self.read();
        tokio::task::yield_now().await;
        self.write()
    }

    /// Ends the section and records it (without asking the guard).
    pub fn exit(self) {
        self.record(None);
    }

    /// Ends the section and records it, noting whether `guard` still says
    /// held now (see *conflicts while held* in the [crate docs](crate)).
    pub fn exit_checked(self, guard: &LockGuard) {
        let held = guard.is_held();
        self.record(Some(held));
    }

    fn record(self, held_throughout: Option<bool>) {
        lock(&self.per.sections).push(SectionRecord {
            enter: self.enter,
            exit: Instant::now(),
            mode: self.mode,
            held_throughout,
        });
    }
}

/// What the checker found in one scenario run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Critical sections entered (= acquisitions that reported held).
    pub acquisitions: u64,
    /// Critical sections finished.
    pub sections: u64,
    /// Faults injected.
    pub faults: u64,
    /// Sections that began while a section they conflict with was running
    /// (any two of a mutex, a writer with anyone, more than N permits).
    pub overlaps: u64,
    /// The same, counting only sections whose guard said held to the end:
    /// the lock broke its promise even to holders that checked it.
    pub conflicts_while_held: u64,
    /// Sections whose end asked the guard (`conflicts_while_held` is
    /// measured only among them; 0: not measured in this scenario).
    pub checked_sections: u64,
    /// Fenced writes accepted after a later holder had claimed the register
    /// (later: it asked for the lock only once the writer held it).
    pub stale_accepted: u64,
    /// Fenced writes rejected as stale by the register.
    pub stale_rejected: u64,
    /// Fenced writes attempted (claims included).
    pub fenced_writes: u64,
    /// Plain-register increments lost to concurrent writers.
    pub lost_updates: u64,
    /// Retake-after-crash samples.
    pub retakes: u64,
    /// Median retake time after a holder crash.
    pub retake_p50: Option<Duration>,
    /// 99th percentile retake time after a holder crash.
    pub retake_p99: Option<Duration>,
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// Backend name.
    pub backend: String,
    /// Scenario name.
    pub scenario: String,
    /// Whether the backend has fencing tokens.
    pub fencing: bool,
    /// The checker's numbers.
    pub stats: Stats,
    /// What the test asserted, in words.
    pub expectation: String,
    /// Whether the expectation held.
    pub passed: bool,
}

/// The report of a whole run.
#[derive(Debug, Default)]
pub struct Report {
    rows: Mutex<Vec<Row>>,
}

impl Report {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a row.
    pub fn push(&self, row: Row) {
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(row);
    }

    /// The rows, sorted by backend then scenario.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone();
        rows.sort_by(|a, b| (&a.backend, &a.scenario).cmp(&(&b.backend, &b.scenario)));
        rows
    }

    /// The report as a Markdown table, with per-backend totals.
    pub fn markdown(&self) -> String {
        let ms =
            |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{} ms", d.as_millis()));
        let mut out = String::from(
            "| backend | scenario | acquisitions | faults | overlaps | conflicts while held | stale writes accepted | stale writes rejected | retake p50 | retake p99 | expectation | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let rows = self.rows();
        for r in &rows {
            let s = &r.stats;
            let stale = if r.fencing {
                s.stale_accepted.to_string()
            } else {
                "n/a (no token)".into()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.backend,
                r.scenario,
                s.acquisitions,
                s.faults,
                s.overlaps,
                if s.checked_sections > 0 {
                    s.conflicts_while_held.to_string()
                } else {
                    "-".into()
                },
                stale,
                if r.fencing {
                    s.stale_rejected.to_string()
                } else {
                    "-".into()
                },
                ms(s.retake_p50),
                ms(s.retake_p99),
                r.expectation,
                if r.passed { "ok" } else { "FAILED" }
            ));
        }
        let mut backends: Vec<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
        backends.dedup();
        out.push_str("\n| backend | total acquisitions | total faults injected |\n|---|---|---|\n");
        for b in backends {
            let (a, f) = rows
                .iter()
                .filter(|r| r.backend == b)
                .fold((0, 0), |(a, f), r| {
                    (a + r.stats.acquisitions, f + r.stats.faults)
                });
            out.push_str(&format!("| {b} | {a} | {f} |\n"));
        }
        out
    }

    /// The report as JSON: `{"rows": [...]}`, one object per row.
    pub fn json(&self) -> String {
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        let rows: Vec<serde_json::Value> = self
            .rows()
            .iter()
            .map(|r| {
                let s = &r.stats;
                serde_json::json!({
                    "backend": r.backend,
                    "scenario": r.scenario,
                    "fencing": r.fencing,
                    "acquisitions": s.acquisitions,
                    "sections": s.sections,
                    "faults": s.faults,
                    "overlaps": s.overlaps,
                    "conflicts_while_held": (s.checked_sections > 0).then_some(s.conflicts_while_held),
                    "stale_accepted": s.stale_accepted,
                    "stale_rejected": s.stale_rejected,
                    "lost_updates": s.lost_updates,
                    "retakes": s.retakes,
                    "retake_p50_ms": ms(s.retake_p50),
                    "retake_p99_ms": ms(s.retake_p99),
                    "expectation": r.expectation,
                    "passed": r.passed,
                })
            })
            .collect();
        let mut out =
            serde_json::to_string_pretty(&serde_json::json!({ "rows": rows })).unwrap_or_default();
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holds token 5 and is paused in its section; B is granted token 6,
    /// claims, writes and exits; A resumes: its fenced write is refused,
    /// its plain write lands.
    fn paused_holder(w: &Workload, name: &str) {
        let mut a = w.enter_with(name, Some(FencingToken::new(5)));
        a.read();
        let mut b = w.enter_with(name, Some(FencingToken::new(6)));
        b.read();
        assert_eq!(b.write(), Some(true));
        b.exit();
        assert_eq!(a.write(), Some(false));
        a.exit();
    }

    /// The server forgot its counter: the holder after A (token 57) gets a
    /// smaller token (1), which is refused, and A's write is accepted.
    fn tokens_going_backwards(w: &Workload, name: &str) {
        let mut a = w.enter_with(name, Some(FencingToken::new(57)));
        a.read();
        let mut b = w.enter_with(name, Some(FencingToken::new(1)));
        b.read();
        assert_eq!(b.write(), Some(false));
        b.exit();
        assert_eq!(a.write(), Some(true));
        a.exit();
    }

    /// A (token 8) learns of its grant late and enters after B (token 9),
    /// which asked for the lock later: A's claim and write are refused, B's
    /// write is accepted.
    fn holder_entering_late(w: &Workload, name: &str) {
        let a_asked = Instant::now();
        let b_asked = Instant::now();
        let mode = LockMode::Exclusive;
        let mut b = w.enter_as(name, Some(FencingToken::new(9)), mode, b_asked);
        b.read();
        let mut a = w.enter_as(name, Some(FencingToken::new(8)), mode, a_asked);
        a.read();
        assert_eq!(b.write(), Some(true));
        b.exit();
        assert_eq!(a.write(), Some(false));
        a.exit();
    }

    #[tokio::test]
    async fn checker_counts_overlaps_and_stale_writes() {
        let w = Workload::new();
        paused_holder(&w, "n");
        let s = w.stats();
        assert_eq!(s.overlaps, 1);
        assert_eq!(s.stale_accepted, 0);
        assert_eq!(s.stale_rejected, 1);
        assert_eq!(s.lost_updates, 1);
    }

    #[tokio::test]
    async fn tokens_going_backwards_are_counted_as_stale_accepted() {
        let w = Workload::new();
        tokens_going_backwards(&w, "n");
        let s = w.stats();
        assert_eq!(s.stale_accepted, 1);
    }

    /// A holder that learns of its grant late enters after the next holder:
    /// its older token is refused, and the next holder's writes are not
    /// stale (they come from the later grant, whatever the entry order).
    #[tokio::test]
    async fn a_holder_entering_late_makes_no_stale_accept() {
        let w = Workload::new();
        holder_entering_late(&w, "n");
        let s = w.stats();
        assert_eq!((s.overlaps, s.stale_rejected, s.stale_accepted), (1, 2, 0));
    }

    /// The same three cases against a real PostgreSQL: the store refuses
    /// the paused holder, when tokens go backwards the checker still sees
    /// the older holder's accepted write, and a holder entering late makes
    /// no stale accept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checker_reads_the_verdicts_of_postgres() {
        let server = tokio::task::block_in_place(|| lock_testbed::PostgresServer::start().unwrap());
        let registers = PgRegisters::connect(server.url()).await.unwrap();
        let w = Workload::in_postgres(registers);
        paused_holder(&w, "paused");
        let mut c = w.enter_with("paused", Some(FencingToken::new(6)));
        c.read();
        assert_eq!(c.write(), Some(true));
        c.read();
        assert_eq!(c.read_fenced, 2, "B's and C's increments are in the table");
        c.exit();
        tokens_going_backwards(&w, "backwards");
        holder_entering_late(&w, "late");
        let s = w.stats();
        assert_eq!((s.overlaps, s.stale_rejected, s.stale_accepted), (3, 5, 1));
        tokio::task::block_in_place(|| drop(server));
    }

    /// An older holder writing while a later holder claims the register:
    /// each of its writes lands either before the claim (accepted, not
    /// stale: the register had not heard of the later holder) or after it
    /// (refused). None may count as an accepted stale write, however the
    /// two threads interleave.
    #[test]
    fn a_write_racing_a_later_claim_is_stale_only_after_that_claim() {
        let w = Arc::new(Workload::new());
        for trial in 0..2_000 {
            let name = format!("race{trial}");
            let mut a = w.enter_with(&name, Some(FencingToken::new(1)));
            let start = Arc::new(std::sync::Barrier::new(2));
            let older = {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    // Writes until the later holder's claim refuses it.
                    while a.write() == Some(true) {}
                    a.exit();
                })
            };
            start.wait();
            let b = w.enter_with(&name, Some(FencingToken::new(2)));
            older.join().unwrap();
            b.exit();
        }
        let s = w.stats();
        assert_eq!(s.stale_accepted, 0, "{s:?}");
        assert_eq!(s.stale_rejected, 2_000, "{s:?}");
    }

    #[tokio::test]
    async fn sequential_sections_are_clean() {
        let w = Workload::new();
        for t in 1..=10 {
            let mut s = w.enter_with("n", Some(FencingToken::new(t)));
            s.read_modify_write().await;
            s.exit();
        }
        let s = w.stats();
        assert_eq!(
            (
                s.overlaps,
                s.stale_accepted,
                s.stale_rejected,
                s.lost_updates
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(s.acquisitions, 10);
        let r = Report::new();
        r.push(Row {
            backend: "memory".into(),
            scenario: "smoke".into(),
            fencing: true,
            stats: s,
            expectation: "0 overlaps".into(),
            passed: true,
        });
        assert!(r.markdown().contains("| memory | smoke | 10 |"));
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["rows"][0]["acquisitions"], 10);
        assert!(
            json["rows"][0]["conflicts_while_held"].is_null(),
            "not asked"
        );
    }

    /// Readers overlap freely; a writer with anyone is an overlap; a
    /// semaphore of 2 overlaps at its third holder; a mutex, a read-write
    /// lock and a semaphore of one name do not conflict with each other;
    /// readers and permit holders do not write.
    #[tokio::test]
    async fn conflicts_follow_the_kind_of_lock() {
        let w = Workload::new();
        let token = Some(FencingToken::new(1));
        let now = Instant::now;
        let mut r1 = w.enter_as("n", token, LockMode::Read, now());
        let r2 = w.enter_as("n", token, LockMode::Read, now());
        assert_eq!(r1.write(), None, "readers do not write");
        let m = w.enter_as("n", token, LockMode::Exclusive, now());
        let p1 = w.enter_as("n", token, LockMode::Permit { permits: 2 }, now());
        let p2 = w.enter_as("n", token, LockMode::Permit { permits: 2 }, now());
        assert_eq!(
            w.stats().fenced_writes,
            1,
            "only the mutex claimed the register"
        );
        assert_eq!(w.stats().overlaps, 0);
        // A writer while r1 and r2 read, not held to the end; a third
        // permit holder while two hold, held to the end.
        let writer = w.enter_as("n", Some(FencingToken::new(2)), LockMode::Write, now());
        let p3 = w.enter_as("n", token, LockMode::Permit { permits: 2 }, now());
        for s in [r1, r2, m, p1, p2, p3] {
            s.record(Some(true));
        }
        writer.record(Some(false));
        let s = w.stats();
        assert_eq!(s.overlaps, 2, "{s:?}");
        assert_eq!(s.conflicts_while_held, 1, "{s:?}");
    }
}

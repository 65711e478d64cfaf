//! The workloads: uncontended cycles, contention on one name, many guards
//! held with keep-alive, readers with a writer on one read-write lock, and
//! the failover of an election whose leader is killed.

mod contended;
mod failover;
mod keep_alive;
mod read_heavy;
mod uncontended;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde::Serialize;

use crate::subject::{BenchResult, Connector, Locker};

pub use contended::{contended, Contended, ContendedParams};
pub use failover::{failover, Candidate, Electorate, Failover, FailoverParams, Term};
pub use keep_alive::{
    keep_alive, ops_rate, KeepAlive, KeepAliveParams, Renewals, KEEP_ALIVE_SETTLE,
};
pub use read_heavy::{read_heavy, ReadHeavy, ReadHeavyParams};
pub use uncontended::{
    uncontended, uncontended_pool, CycleSamples, Uncontended, UncontendedParams,
};

/// How many errors are kept, in words, per measurement.
const KEPT_ERRORS: usize = 3;
/// Bound on one acquire+release cycle of an uncontended run.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors seen during a measurement: a count and the first few messages.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Errors {
    /// How many operations failed.
    pub count: usize,
    /// The first few messages.
    pub first: Vec<String>,
}

impl Errors {
    fn push(&mut self, e: String) {
        self.count += 1;
        if self.first.len() < KEPT_ERRORS {
            self.first.push(e);
        }
    }

    fn merge(&mut self, other: Errors) {
        self.count += other.count;
        for e in other.first {
            if self.first.len() < KEPT_ERRORS {
                self.first.push(e);
            }
        }
    }

    /// True when nothing failed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// `n` clients of `connector`, connected together.
async fn connect_pool(connector: &dyn Connector, n: usize) -> BenchResult<Vec<Arc<dyn Locker>>> {
    join_all((0..n).map(|_| connector.connect()))
        .await
        .into_iter()
        .collect()
}

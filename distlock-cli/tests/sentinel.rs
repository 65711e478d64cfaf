//! `distlock run --url redis+sentinel://...` across a failover: the
//! sentinels promote a replica while CMD runs, and CMD runs to its end
//! with the lock held (its TTL outlasts the failover), a standby waiting
//! behind it takes the lock afterwards from the new primary with a larger
//! token, and both exit 0.

use lock_testbed::{unique_name, SentinelSet};

mod support;
use support::{run_keeps_working_across, FAILOVER};

#[test]
fn run_keeps_working_across_a_failover() {
    let mut set = SentinelSet::start().expect("starting a Sentinel set");
    let url = format!("{}?connect_timeout=2s&request_timeout=300ms", set.url());
    let name = unique_name("sentinel-run");
    run_keeps_working_across(&url, &name, || {
        let old = set.kill_primary().expect("kill the primary");
        let new = set
            .wait_for_failover(old, FAILOVER)
            .expect("the sentinels promote a replica");
        assert_ne!(old, new);
    });
}

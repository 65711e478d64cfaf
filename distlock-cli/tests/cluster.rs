//! `distlock run --url redis+cluster://...` across a failover: the
//! primary that owns the lock name's slot is killed while CMD runs and its
//! replica takes over; CMD runs to its end with the lock held (its TTL
//! outlasts the failover), a standby waiting behind it takes the lock
//! afterwards from the new primary with a larger token, and both exit 0.

use lock_testbed::{unique_name, RedisClusterSet};

mod support;
use support::{run_keeps_working_across, FAILOVER};

#[test]
fn run_keeps_working_across_a_failover() {
    let mut set = RedisClusterSet::start().expect("starting a Redis Cluster");
    let url = format!("{}?connect_timeout=2s&request_timeout=300ms", set.url());
    let name = unique_name("cluster-run");
    run_keeps_working_across(&url, &name, || {
        let old = set
            .owner_of_slot(RedisClusterSet::slot_of(&name))
            .expect("the owner of the name's slot");
        set.kill_node(old).expect("kill the name's primary");
        let new = set
            .wait_for_failover(old, FAILOVER)
            .expect("a replica takes over");
        assert_ne!(old, new);
    });
}

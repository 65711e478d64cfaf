//! The key layout shared by `lock-redis` and `lock-redlock`.
//!
//! Layout (compatible with redis-py `Lock`, redsync, node-redlock, rslock):
//! the lock key is the lock name (with an optional prefix) holding a random
//! owner token; acquisition is `SET key token NX PX ttl`; release and extend
//! compare the token first. `lock-redis` adds a fencing counter
//! `{key} fencing` (same cluster slot through the hash tag) that never
//! expires, and publishes on `{key} released` when it releases, so that
//! waiters wake at once instead of polling.
//!
//! The mutex's holder describes itself in `{key} holder`: its owner token,
//! a space and the holder's description as JSON (`lock_core::Holder`),
//! with the lock key's expiry; every script that sets, hands over, extends
//! or deletes the lock key does the same to it, so a description is shown
//! only while its token holds the lock key (peers never touch it).
//!
//! A leader election on the name (`lock_core::LeaderElection`) is the mutex
//! machinery on keys of its own, beside the name's mutex (see
//! [`LeaderKeys`] and the crate's docs.md for the whole layout):
//! `{key} leader` holds the leader's owner token with the term's TTL,
//! `{key} leader info` holds `<owner token> <epoch> <since ms> <value>`
//! with the same TTL, `{key} leader queue` / `{key} leader lapse` are the
//! candidates in line, `{key} leader released` wakes them, `{key} leader
//! delay` is the lock-delay marker, and `{key} leader changed` announces
//! every change to followers: `leader <version> <epoch> <since ms> <pttl
//! ms> <value>`, `extended <version> <epoch> <pttl ms>` or `none
//! <version>`. An epoch is a token of `{key} fencing`.
//!
//! Every auxiliary key is the lock key in braces, a space and a suffix. Lock
//! names and key prefixes cannot contain whitespace, so no lock key is ever
//! an auxiliary key of another lock: the lock named `{x}:fencing` is just a
//! lock, never the counter of the lock `x`.
//!
//! On a Redis Cluster ([`Layout::Cluster`]) every key of a name must hash
//! to the lock key's slot. `{L} suffix` does, unless the lock key `L`
//! holds a `}`: then Redis hashes something else in either key. So a lock
//! key with a `}` and a hash tag `T` (the text between its first `{` and
//! the first `}` after it, not empty; `L` hashes `T`) has the auxiliary
//! keys `{T} L suffix`, which hash `T` too and never equal another name's
//! keys (no lock key holds a space); a lock key with a `}` and no hash tag
//! (`a}b`, `x{}y`) is refused on a cluster. One server and Sentinel keep
//! `{L} suffix` for every name, so that no existing name's keys (its
//! fencing counter above all) change; moving such a name to a cluster
//! starts its fencing counter anew.

use std::fmt;

/// The Redis keys of one lock name, written one after another into one
/// string (every acquisition and release makes them: one allocation, not
/// twelve) and read through the methods below.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    /// The lock key, then each auxiliary key of [`AUX_SUFFIXES`].
    text: String,
    /// Where each key ends in `text`: the lock key's end, then each
    /// auxiliary key's.
    ends: [usize; AUX_SUFFIXES.len() + 1],
}

/// The auxiliary keys' suffixes, in the order of [`Keys`]'s methods.
const AUX_SUFFIXES: [&str; 11] = [
    "fencing",
    RELEASED,
    "queue",
    "lapse",
    RW,
    "rw queue",
    "rw lapse",
    "rw released",
    PERMITS,
    "permits released",
    HOLDER,
];

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("lock", &self.lock())
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// The key at `index` (0: the lock key; then [`AUX_SUFFIXES`]'s).
    fn nth(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start..self.ends[index]]
    }

    /// The lock key itself: `prefix + name`.
    pub fn lock(&self) -> &str {
        self.nth(0)
    }

    /// The fencing counter: `{prefix + name} fencing` (never expires).
    pub fn fencing(&self) -> &str {
        self.nth(1)
    }

    /// The pub/sub channel a release publishes on: `{prefix + name} released`.
    pub fn released(&self) -> &str {
        self.nth(2)
    }

    /// The mutex's waiters by arrival: `{prefix + name} queue`.
    pub fn queue(&self) -> &str {
        self.nth(3)
    }

    /// The mutex's waiters by lapse time: `{prefix + name} lapse`.
    pub fn lapse(&self) -> &str {
        self.nth(4)
    }

    /// The read-write lock's holders: `{prefix + name} rw`.
    pub fn rw(&self) -> &str {
        self.nth(5)
    }

    /// The read-write lock's waiters by arrival: `{prefix + name} rw queue`.
    pub fn rw_queue(&self) -> &str {
        self.nth(6)
    }

    /// The read-write lock's waiters by lapse time: `{prefix + name} rw lapse`.
    pub fn rw_lapse(&self) -> &str {
        self.nth(7)
    }

    /// The read-write lock's release channel: `{prefix + name} rw released`.
    pub fn rw_released(&self) -> &str {
        self.nth(8)
    }

    /// The semaphore's holders: `{prefix + name} permits`.
    pub fn permits(&self) -> &str {
        self.nth(9)
    }

    /// The semaphore's release channel: `{prefix + name} permits released`.
    pub fn permits_released(&self) -> &str {
        self.nth(10)
    }

    /// The mutex holder's description: `{prefix + name} holder`, holding
    /// `<owner token> <description JSON>` with the lock key's expiry.
    pub fn holder(&self) -> &str {
        self.nth(11)
    }
}

/// The suffix of the mutex's release channel ([`Keys::released`]).
pub const RELEASED: &str = "released";
/// The suffix of a Redlock lock's line of waiters (see
/// [`ACQUIRE_IN_LINE`](super::scripts::ACQUIRE_IN_LINE)).
pub const LINE: &str = "line";
/// The suffix of the lapse times of a Redlock lock's line.
pub const LINE_LAPSE: &str = "line lapse";
/// The suffix of a Redlock lock's turn sequence on one node: the sequence
/// of the node's latest reservation for the first in line (it expires with
/// the line; the server's clock stands in for it when it is gone).
pub const LINE_SEQ: &str = "line seq";
/// The suffix of the mutex holder's description ([`Keys::holder`]).
pub const HOLDER: &str = "holder";
/// The suffix of the read-write lock's holders key ([`Keys::rw`]).
pub const RW: &str = "rw";
/// The suffix of the semaphore's holders key ([`Keys::permits`]).
pub const PERMITS: &str = "permits";

/// The suffix of the election's leader key ([`LeaderKeys::leader`]).
pub const LEADER: &str = "leader";

/// The keys of one election: the name's lock key `L` in braces, then
/// `leader` and the key's part (see the [module docs](self)). The leader
/// key's own auxiliaries are the leader key, a space and a suffix, so a
/// leader key alone names them all ([`LeaderKeys::of_leader`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderKeys {
    /// In the order the election's scripts take them
    /// ([`ACQUIRE_LEADER`](super::scripts::ACQUIRE_LEADER)).
    keys: [String; 8],
}

impl LeaderKeys {
    /// The election keys of lock `name` under `prefix` (empty for none),
    /// laid out for one server ([`Layout::Standalone`]).
    pub fn new(prefix: &str, name: &str) -> Self {
        Self::build(&format!("{prefix}{name}"), None)
    }

    /// The election keys of the lock key `lock`, led by the hash tag `tag`
    /// if given (see [`Layout`]).
    fn build(lock: &str, tag: Option<&str>) -> Self {
        let leader = Keys::aux_tagged(lock, LEADER, tag);
        let sub = |suffix: &str| format!("{leader} {suffix}");
        Self {
            keys: [
                leader.clone(),
                Keys::aux_tagged(lock, "fencing", tag),
                sub("queue"),
                sub("lapse"),
                sub("released"),
                sub("info"),
                sub("delay"),
                sub("changed"),
            ],
        }
    }

    /// Every key, in the order of the election's scripts.
    pub fn all(&self) -> [&str; 8] {
        let k = &self.keys;
        [&k[0], &k[1], &k[2], &k[3], &k[4], &k[5], &k[6], &k[7]]
    }

    /// The leader key: `{L} leader`, the leader's owner token.
    pub fn leader(&self) -> &str {
        &self.keys[0]
    }

    /// The name's fencing counter `{L} fencing`: epochs are its tokens.
    pub fn fencing(&self) -> &str {
        &self.keys[1]
    }

    /// The candidates in line by arrival: `{L} leader queue`.
    pub fn queue(&self) -> &str {
        &self.keys[2]
    }

    /// The candidates' places by lapse time: `{L} leader lapse`.
    pub fn lapse(&self) -> &str {
        &self.keys[3]
    }

    /// The candidates' wake-up channel: `{L} leader released`.
    pub fn released(&self) -> &str {
        &self.keys[4]
    }

    /// The leader's info: `{L} leader info`, holding `<owner token> <epoch>
    /// <since ms> <value>`.
    pub fn info(&self) -> &str {
        &self.keys[5]
    }

    /// The lock-delay marker: `{L} leader delay`, holding `<owner token>
    /// <lock-delay ms>`.
    pub fn delay(&self) -> &str {
        &self.keys[6]
    }

    /// The followers' channel: `{L} leader changed`.
    pub fn changed(&self) -> &str {
        &self.keys[7]
    }

    /// The info key, lock-delay marker and change channel of the leader
    /// key `leader` (for renewals, which know only the leader key).
    pub fn of_leader(leader: &str) -> [String; 3] {
        [
            format!("{leader} info"),
            format!("{leader} delay"),
            format!("{leader} changed"),
        ]
    }
}

impl Keys {
    /// The keys of lock `name` under `prefix` (empty for none), laid out
    /// for one server ([`Layout::Standalone`]). `prefix` must pass
    /// [`check_prefix`] (the configurations check it).
    pub fn new(prefix: &str, name: &str) -> Self {
        Self::build(&[prefix, name], None)
    }

    /// The keys that go with the lock key `lock` (`prefix + name`), laid
    /// out for one server.
    pub fn of_lock(lock: &str) -> Self {
        Self::build(&[lock], None)
    }

    /// The keys of the lock key made of `parts`, their auxiliary keys led
    /// by the hash tag `tag` and the lock key if given (see [`Layout`]).
    fn build(parts: &[&str], tag: Option<&str>) -> Self {
        let lock_len: usize = parts.iter().map(|p| p.len()).sum();
        let head_len = tag.map_or(lock_len + 3, |t| t.len() + lock_len + 4);
        let aux_len: usize = AUX_SUFFIXES.iter().map(|s| head_len + s.len()).sum();
        let mut text = String::with_capacity(lock_len + aux_len);
        parts.iter().for_each(|part| text.push_str(part));
        let mut ends = [0; AUX_SUFFIXES.len() + 1];
        ends[0] = lock_len;
        for (i, suffix) in AUX_SUFFIXES.iter().enumerate() {
            text.push('{');
            match tag {
                None => {
                    text.extend_from_within(..lock_len);
                    text.push_str("} ");
                }
                Some(tag) => {
                    text.push_str(tag);
                    text.push_str("} ");
                    text.extend_from_within(..lock_len);
                    text.push(' ');
                }
            }
            text.push_str(suffix);
            ends[i + 1] = text.len();
        }
        Self { text, ends }
    }

    /// The auxiliary key `suffix` of the lock key `lock`, laid out for one
    /// server: `{lock} suffix`.
    pub fn aux(lock: &str, suffix: &str) -> String {
        Self::aux_tagged(lock, suffix, None)
    }

    /// The auxiliary key `suffix` of the lock key `lock`: `{lock} suffix`,
    /// or `{tag} lock suffix` with a hash tag (see [`Layout`]).
    fn aux_tagged(lock: &str, suffix: &str, tag: Option<&str>) -> String {
        match tag {
            None => format!("{{{lock}}} {suffix}"),
            Some(tag) => format!("{{{tag}}} {lock} {suffix}"),
        }
    }
}

/// How a name's keys are laid out: for one server (and Sentinel), or for
/// a Redis Cluster, where a lock key with a `}` puts its auxiliary keys
/// behind its hash tag (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One server, or the primary of a Sentinel-managed deployment:
    /// `{L} suffix` for every lock key `L`.
    Standalone,
    /// A Redis Cluster: every key of a name in the lock key's slot.
    Cluster,
}

impl Layout {
    /// The hash tag that leads the auxiliary keys of the lock key made of
    /// `parts`: none when they are `{L} suffix` (one server, or no `}` in
    /// `L`); on a cluster, `L`'s hash tag, or `InvalidArgument` if it has
    /// none.
    fn tag(self, parts: &[&str]) -> lock_core::Result<Option<String>> {
        if self == Layout::Standalone || !parts.iter().any(|p| p.contains('}')) {
            return Ok(None);
        }
        let lock = parts.concat();
        match hash_tag(&lock) {
            Some(tag) => Ok(Some(tag.to_string())),
            None => Err(lock_core::LockError::invalid(format!(
                "lock key {lock:?} has a '}}' but no hash tag ('{{' then a non-empty text then \
                 '}}'), so its keys cannot share one Redis Cluster slot: rename it, or give \
                 it a hash tag"
            ))),
        }
    }

    /// The keys of lock `name` under `prefix` (see [`Keys::new`]); on a
    /// cluster, `InvalidArgument` for a lock key with a `}` and no hash tag.
    pub fn keys(self, prefix: &str, name: &str) -> lock_core::Result<Keys> {
        let tag = self.tag(&[prefix, name])?;
        Ok(Keys::build(&[prefix, name], tag.as_deref()))
    }

    /// The keys that go with the lock key `lock` (see [`Layout::keys`]).
    pub fn keys_of_lock(self, lock: &str) -> lock_core::Result<Keys> {
        let tag = self.tag(&[lock])?;
        Ok(Keys::build(&[lock], tag.as_deref()))
    }

    /// The auxiliary key `suffix` of the lock key `lock` (see [`Layout::keys`]).
    pub fn aux(self, lock: &str, suffix: &str) -> lock_core::Result<String> {
        let tag = self.tag(&[lock])?;
        Ok(Keys::aux_tagged(lock, suffix, tag.as_deref()))
    }

    /// The election keys of lock `name` under `prefix` (see
    /// [`LeaderKeys::new`] and [`Layout::keys`]).
    pub fn leader_keys(self, prefix: &str, name: &str) -> lock_core::Result<LeaderKeys> {
        let lock = format!("{prefix}{name}");
        let tag = self.tag(&[&lock])?;
        Ok(LeaderKeys::build(&lock, tag.as_deref()))
    }
}

/// Redis Cluster's hash tag of `key`: the text between its first `{` and
/// the first `}` after it, if not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// Checks a key prefix: no whitespace or control characters, so that no
/// lock key can be an auxiliary key (see the module docs).
pub fn check_prefix(prefix: &str) -> lock_core::Result<()> {
    match prefix
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        Some(c) => Err(lock_core::LockError::invalid(format!(
            "key prefix {prefix:?} contains {c:?}; whitespace and control characters are not allowed"
        ))),
        None => Ok(()),
    }
}

/// The value of a Redlock key reserved for the first in line: `line:` and
/// its wait id (see [`ACQUIRE_IN_LINE`](super::scripts::ACQUIRE_IN_LINE)).
/// It is also that waiter's owner token when it holds the lock by the
/// reservation alone (a quorum of nodes reserved the key for it), so it
/// contains no space.
pub const RESERVED_FOR: &str = "line:";

/// A random owner token: 128 bits from the OS-seeded thread RNG, as 32 hex digits.
pub fn owner_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::list::match_prefix;
    use redis::cluster_routing::SlotAddr;

    #[test]
    fn keys_share_a_hash_slot_tag() {
        let k = Keys::new("", "jobs/report");
        assert_eq!(k.lock(), "jobs/report");
        assert_eq!(k.fencing(), "{jobs/report} fencing");
        assert_eq!(k.released(), "{jobs/report} released");
        assert_eq!(Keys::new("app:", "x").lock(), "app:x");
        // A name shaped like another lock's counter is just a lock.
        let tricky = Keys::new("", "{x}:fencing");
        assert_ne!(tricky.lock(), Keys::new("", "x").fencing());
        assert!(check_prefix("locks:").is_ok());
        assert!(check_prefix("a b").is_err());
        assert_eq!(match_prefix("jobs/[a]*"), "jobs/\\[a\\]\\**");
    }

    /// The auxiliary keys of `k`, in the order of [`AUX_SUFFIXES`].
    fn aux_keys(k: &Keys) -> [&str; 11] {
        [
            k.fencing(),
            k.released(),
            k.queue(),
            k.lapse(),
            k.rw(),
            k.rw_queue(),
            k.rw_lapse(),
            k.rw_released(),
            k.permits(),
            k.permits_released(),
            k.holder(),
        ]
    }

    #[test]
    fn every_auxiliary_key_is_the_lock_key_in_braces_and_its_suffix() {
        let k = Keys::new("app:", "jobs/é x");
        assert_eq!(k.lock(), "app:jobs/é x");
        for (key, suffix) in aux_keys(&k).into_iter().zip(AUX_SUFFIXES) {
            assert_eq!(key, Keys::aux("app:jobs/é x", suffix));
        }
        assert_eq!(k.rw_released(), "{app:jobs/é x} rw released");
        assert_eq!(Keys::of_lock("app:jobs/é x"), k);
        assert_eq!(Keys::new("", "").fencing(), "{} fencing");
    }

    #[test]
    fn election_keys_share_the_names_hash_tag() {
        let k = LeaderKeys::new("app:", "jobs");
        assert_eq!(k.leader(), "{app:jobs} leader");
        assert_eq!(k.fencing(), Keys::new("app:", "jobs").fencing());
        assert_eq!(k.changed(), "{app:jobs} leader changed");
        assert_eq!(
            LeaderKeys::of_leader(k.leader()),
            [k.info(), k.delay(), k.changed()].map(String::from)
        );
        assert!(k.all().iter().all(|key| key.starts_with("{app:jobs} ")));
    }

    /// Every key of lock `name` under `prefix` in `layout`: the lock's and
    /// the election's.
    fn all_keys(layout: Layout, prefix: &str, name: &str) -> lock_core::Result<Vec<String>> {
        let k = layout.keys(prefix, name)?;
        let mut all = vec![k.lock().to_string()];
        all.extend(aux_keys(&k).map(String::from));
        let leader = layout.leader_keys(prefix, name)?;
        all.extend(leader.all().map(String::from));
        all.extend(LeaderKeys::of_leader(leader.leader()));
        for suffix in [LINE, LINE_LAPSE, LINE_SEQ, HOLDER, RW, PERMITS] {
            all.push(layout.aux(k.lock(), suffix)?);
        }
        assert_eq!(layout.keys_of_lock(k.lock())?, k);
        Ok(all)
    }

    const BRACED: [(&str, &str); 12] = [
        ("", "a{b}c"),
        ("", "{x}"),
        ("", "{x}y"),
        ("", "{a}{b}"),
        ("", "a{b"),
        ("", "{x}:fencing"),
        ("app{1}:", "n"),
        ("app{:", "n}"),
        ("", "x{y}{}"),
        ("", "a}b{c}"),
        ("", "jobs/report"),
        ("app:", "jobs/é"),
    ];

    #[test]
    fn on_a_cluster_every_key_of_a_name_is_in_the_lock_keys_slot() {
        for (prefix, name) in BRACED {
            let all = all_keys(Layout::Cluster, prefix, name).unwrap();
            let slot = redis::cluster_routing::Route::with_key(&all[0], SlotAddr::Master);
            for key in &all {
                assert_eq!(
                    redis::cluster_routing::Route::with_key(key, SlotAddr::Master),
                    slot,
                    "{key:?} of {prefix:?} + {name:?}"
                );
            }
            let mut distinct = all.clone();
            distinct.sort();
            distinct.dedup();
            // Repeated on purpose: the election's fencing counter, the three
            // keys of `of_leader`, and the `aux` of holder, rw and permits.
            assert_eq!(distinct.len(), all.len() - 7, "{all:?}");
        }
        let k = Layout::Cluster.keys("", "a{b}c").unwrap();
        assert_eq!(k.fencing(), "{b} a{b}c fencing");
        assert_eq!(k.released(), "{b} a{b}c released");
        let untaggable = ["a}b", "x{}y", "}{", "{}x}", "x{}y{z}"];
        for name in untaggable {
            let e = Layout::Cluster.keys("", name).unwrap_err();
            assert_eq!(
                e.kind(),
                lock_core::LockErrorKind::InvalidArgument,
                "{name}"
            );
            assert!(!e.is_retryable());
            assert!(Layout::Cluster.leader_keys("", name).is_err());
            assert!(Layout::Cluster.keys_of_lock(name).is_err());
            assert!(Layout::Standalone.keys("", name).is_ok(), "{name}");
        }
    }

    #[test]
    fn one_servers_layout_is_unchanged_by_braces() {
        for (prefix, name) in BRACED {
            let lock = format!("{prefix}{name}");
            let one = Layout::Standalone.keys(prefix, name).unwrap();
            assert_eq!(one, Keys::new(prefix, name));
            assert_eq!(one.fencing(), format!("{{{lock}}} fencing"));
            assert_eq!(one.holder(), format!("{{{lock}}} holder"));
            assert_eq!(Layout::Standalone.keys_of_lock(&lock).unwrap(), one);
            assert_eq!(
                Layout::Standalone.aux(&lock, RW).unwrap(),
                Keys::aux(&lock, RW)
            );
            assert_eq!(
                Layout::Standalone.leader_keys(prefix, name).unwrap(),
                LeaderKeys::new(prefix, name)
            );
            assert_eq!(
                LeaderKeys::new(prefix, name).leader(),
                format!("{{{lock}}} leader")
            );
            if !lock.contains('}') {
                assert_eq!(Layout::Cluster.keys(prefix, name).unwrap(), one);
            }
        }
    }

    #[test]
    fn owner_tokens_are_128_bit_and_distinct() {
        let (a, b) = (owner_token(), owner_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}

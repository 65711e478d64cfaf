//! Contender node names: the exact shapes Curator and kazoo give them, which
//! recipe each belongs to, and their order.
//!
//! Every recipe this crate speaks puts ephemeral-sequential children under a
//! lock's znode, named `<protection prefix><marker><10-digit sequence>`:
//!
//! | recipe | Curator (and lock-zk) | kazoo |
//! |---|---|---|
//! | mutex | `_c_<uuid>-lock-<seq>` | `<32 hex>__lock__<seq>` |
//! | read side | `_c_<uuid>-__READ__<seq>` | `<32 hex>__rlock__<seq>` |
//! | write side | `_c_<uuid>-__WRIT__<seq>` | `<32 hex>__lock__<seq>` |
//! | semaphore lease (under `leases`) | `_c_<uuid>-lease-<seq>` | - |
//! | election candidate (`LeaderLatch`) | `_c_<uuid>-latch-<seq>` | - |
//!
//! `<uuid>` is a lowercase hyphenated uuid (36 characters), `<seq>` what
//! ZooKeeper appends: `%010d` of the parent's 32-bit child counter, so 10
//! characters, and after 2^31 child changes (the counter wrapped to
//! negative numbers) `-000000001` or 11 characters such as `-2147483648`.
//! Only a child of exactly one of these shapes is a contender: the znode of
//! a child lock (`a/x-lock-0000000001` under `a`) never is, and lock names
//! with a segment of such a shape are refused ([`check_name`]).
//!
//! Contenders are ordered as Curator and kazoo order them, by the sequence
//! *text* after the marker compared as a string (Curator's
//! `StandardLockInternalsDriver.fixForSorting`, kazoo's sort key), then by
//! name: all agree on who holds a lock. Across the wrap that puts negative
//! sequences (a `-` sorts before every digit) ahead of the positive ones,
//! as it does in Curator.

use lock_core::{LockError, LockName};

/// The child of a semaphore's znode under which its leases live.
pub(crate) const LEASES: &str = "leases";
/// The child of a semaphore's znode that is the mutex a lease is taken under.
pub(crate) const LOCKS: &str = "locks";
/// The persistent child of an election's znode that a term with a
/// lock-delay keeps while it leads (see `crate::election::delay`): no
/// recipe's marker is in it (Curator's `fixForSorting` sorts it by its whole
/// name, after every sequence number: a letter sorts after digits and `-`),
/// and no lock name may have a segment of this name ([`check_name`]).
pub(crate) const LOCK_DELAY: &str = "lock_delay.distlock";

/// What a contender node is, by its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Marker {
    /// `_c_<uuid>-lock-`: Curator's `InterProcessMutex`, and our mutex.
    CuratorLock,
    /// `_c_<uuid>-__READ__`: the read side of Curator's `InterProcessReadWriteLock`.
    CuratorRead,
    /// `_c_<uuid>-__WRIT__`: its write side.
    CuratorWrite,
    /// `_c_<uuid>-lease-`: a lease of Curator's `InterProcessSemaphoreV2`.
    CuratorLease,
    /// `_c_<uuid>-latch-`: a candidate of Curator's `LeaderLatch`, and of
    /// our elections.
    CuratorLatch,
    /// `<hex>__lock__`: kazoo's `Lock`, which is also kazoo's `WriteLock`.
    KazooLock,
    /// `<hex>__rlock__`: kazoo's `ReadLock`.
    KazooRead,
}

impl Marker {
    /// The text between the protection prefix and the sequence number.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Self::CuratorLock => "lock-",
            Self::CuratorRead => "__READ__",
            Self::CuratorWrite => "__WRIT__",
            Self::CuratorLease => "lease-",
            Self::CuratorLatch => "latch-",
            Self::KazooLock => "__lock__",
            Self::KazooRead => "__rlock__",
        }
    }

    fn is_curator(self) -> bool {
        matches!(
            self,
            Self::CuratorLock
                | Self::CuratorRead
                | Self::CuratorWrite
                | Self::CuratorLease
                | Self::CuratorLatch
        )
    }

    const ALL: [Marker; 7] = [
        Self::CuratorLock,
        Self::CuratorRead,
        Self::CuratorWrite,
        Self::CuratorLease,
        Self::CuratorLatch,
        Self::KazooLock,
        Self::KazooRead,
    ];
}

/// A fresh uuid for one acquisition's node: 122 random bits as a version 8
/// (custom) uuid, where Curator's protection uuids are version 4 and
/// kazoo's `uuid4().hex` ones too, so that a node of ours is told from
/// theirs ([`is_ours`]).
pub(crate) fn our_uuid() -> uuid::Uuid {
    uuid::Builder::from_custom_bytes(uuid::Uuid::new_v4().into_bytes()).into_uuid()
}

/// Whether the child `name` was created by lock-zk ([`our_uuid`]: its
/// protection uuid has version 8). Nodes of earlier lock-zk versions (with
/// version 4 uuids) count as not ours.
pub(crate) fn is_ours(name: &str) -> bool {
    name.strip_prefix("_c_")
        .and_then(|rest| rest.get(..36))
        .and_then(|u| uuid::Uuid::try_parse(u).ok())
        .is_some_and(|u| u.get_version_num() == 8)
}

/// The name prefix of one acquisition's node with `marker` (a Curator
/// marker): Curator's protected-mode prefix `_c_<uuid>-<marker>`, to which
/// ZooKeeper appends the sequence number. The uuid finds the node again when
/// the reply to its create was lost.
pub(crate) fn our_prefix(uuid: &uuid::Uuid, marker: Marker) -> String {
    debug_assert!(marker.is_curator());
    format!("_c_{}-{}", uuid.hyphenated(), marker.text())
}

/// One contender child of a lock's znode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child's name (not the full path).
    pub name: String,
    /// Its sequence number.
    pub seq: i64,
    /// Which recipe's node it is.
    pub marker: Marker,
}

impl Contender {
    /// The sequence suffix as ZooKeeper wrote it, what Curator and kazoo
    /// sort by (as a string).
    pub(crate) fn seq_text(&self) -> &str {
        &self.name[self.name.len() - seq_width(self.seq)..]
    }
}

/// The sequence number and marker of a child named exactly like a contender
/// node (see the [module docs](self)), `None` for any other child.
pub(crate) fn parse(name: &str) -> Option<(i64, Marker)> {
    // The two widths never both fit one name: the 11-character form starts
    // with `-`, which would have to end a marker that the 10-character form
    // finds followed by a digit.
    [10, 11].into_iter().find_map(|width| parse_as(name, width))
}

/// [`parse`] with a sequence suffix of `width` characters.
fn parse_as(name: &str, width: usize) -> Option<(i64, Marker)> {
    let (rest, seq) = name.split_at_checked(name.len().checked_sub(width)?)?;
    let seq = parse_seq(seq)?;
    let marker = Marker::ALL.into_iter().find(|m| rest.ends_with(m.text()))?;
    let prefix = &rest[..rest.len() - marker.text().len()];
    let shaped = if marker.is_curator() {
        prefix
            .strip_prefix("_c_")
            .and_then(|p| p.strip_suffix('-'))
            .is_some_and(is_hyphenated_uuid)
    } else {
        prefix.len() == 32 && prefix.bytes().all(is_lower_hex)
    };
    shaped.then_some((seq, marker))
}

/// ZooKeeper's sequence suffix: `%010d` of a signed 32-bit counter, so 10
/// characters (digits, or `-` and 9 digits), or `-` and 10 digits below
/// -999,999,999 once the counter wrapped.
fn parse_seq(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !digits.bytes().all(|b| b.is_ascii_digit()) || digits.is_empty() {
        return None;
    }
    let value = i64::from(s.parse::<i32>().ok()?);
    (seq_width(value) == s.len()).then_some(value)
}

/// The width of `%010d` of `seq`: 11 characters below -999,999,999, else 10.
fn seq_width(seq: i64) -> usize {
    if seq < -999_999_999 {
        11
    } else {
        10
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `8-4-4-4-12` lowercase hex digits, as Java's `UUID.toString()`.
fn is_hyphenated_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => is_lower_hex(b),
        })
}

/// The contenders among `children` that `counts` accepts, in lock order:
/// the sequence text compared as a string, as Curator and kazoo compare it
/// (see the [module docs](self)), then the name.
pub(crate) fn contenders<I, S>(children: I, counts: impl Fn(Marker) -> bool) -> Vec<Contender>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut out: Vec<Contender> = children
        .into_iter()
        .filter_map(|child| {
            let name = child.into();
            parse(&name)
                .filter(|(_, marker)| counts(*marker))
                .map(|(seq, marker)| Contender { name, seq, marker })
        })
        .collect();
    out.sort_by(|a, b| {
        a.seq_text()
            .cmp(b.seq_text())
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Whether a node with `marker` is a contender of a mutex: Curator's and
/// kazoo's mutex nodes (kazoo's `WriteLock` nodes are its mutex nodes).
pub(crate) fn is_mutex(marker: Marker) -> bool {
    matches!(marker, Marker::CuratorLock | Marker::KazooLock)
}

/// Whether a node with `marker` stands in the queue of a read-write lock:
/// Curator's read and write nodes, kazoo's `ReadLock` nodes, and kazoo's
/// `WriteLock` nodes (which are its `Lock` nodes).
pub(crate) fn is_read_write(marker: Marker) -> bool {
    matches!(
        marker,
        Marker::CuratorRead | Marker::CuratorWrite | Marker::KazooRead | Marker::KazooLock
    )
}

/// Whether a node with `marker` is the write side of a read-write lock.
pub(crate) fn is_write(marker: Marker) -> bool {
    matches!(marker, Marker::CuratorWrite | Marker::KazooLock)
}

/// Whether a node with `marker` is a semaphore lease.
pub(crate) fn is_lease(marker: Marker) -> bool {
    marker == Marker::CuratorLease
}

/// Whether a node with `marker` is an election's candidate (Curator's
/// `LeaderLatch`).
pub(crate) fn is_latch(marker: Marker) -> bool {
    marker == Marker::CuratorLatch
}

/// The name of the read node that takes the place of our write node `name`
/// (`_c_<uuid>-__WRIT__<seq>`) when it is downgraded: the same uuid and the
/// same sequence text, `__READ__` instead of `__WRIT__`. It sorts where the
/// write node stands, ahead of every contender that came after it.
pub(crate) fn downgraded(name: &str) -> Option<String> {
    match parse(name) {
        Some((seq, Marker::CuratorWrite)) => {
            let (rest, seq) = name.split_at(name.len() - seq_width(seq));
            let prefix = rest.strip_suffix(Marker::CuratorWrite.text())?;
            Some(format!("{prefix}{}{seq}", Marker::CuratorRead.text()))
        }
        _ => None,
    }
}

/// Refuses a lock name with a segment shaped exactly like a contender node:
/// its znode would be a child of the parent lock's znode that every recipe
/// on that parent takes for a contender. Likewise a segment named
/// [`LOCK_DELAY`], an election's lock-delay marker.
pub(crate) fn check_name(name: &LockName) -> Result<(), LockError> {
    if name.as_str().split('/').any(|seg| seg == LOCK_DELAY) {
        return Err(LockError::invalid(format!(
            "lock name {name}: the segment {LOCK_DELAY:?} is the lock-delay marker of the election one level up; rename the segment"
        )));
    }
    match name.as_str().split('/').find(|seg| parse(seg).is_some()) {
        None => Ok(()),
        Some(seg) => Err(LockError::invalid(format!(
            "lock name {name}: the segment {seg:?} has exactly the shape of a ZooKeeper contender node (Curator's `_c_<uuid>-lock-<10 digits>` or kazoo's `<32 hex>__lock__<10 digits>`, and their read, write, lease and latch forms), which the lock one level up would take for one of its contenders; rename the segment"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_nodes_are_told_from_curators_and_kazoos() {
        let ours = our_prefix(&our_uuid(), Marker::CuratorLatch);
        assert!(is_ours(&format!("{ours}0000000007")));
        let curators = our_prefix(&uuid::Uuid::new_v4(), Marker::CuratorLatch);
        assert!(!is_ours(&format!("{curators}0000000007")));
        assert!(!is_ours("3f2a9c__lock__0000000001"), "kazoo's");
        assert!(!is_ours("_c_short-latch-0000000001"));
    }

    const UUID: &str = "4e1b9a3c-2f5d-4d8e-9a43-0c6f2b1e7d55";
    const HEX: &str = "8a1f0f8cb6a54f6e9d6f2c1f0a3b4c5d";

    #[test]
    fn parses_curator_nodes() {
        // As Curator 5 names them (protected mode), for every recipe.
        for (marker, text) in [
            (Marker::CuratorLock, "lock-"),
            (Marker::CuratorRead, "__READ__"),
            (Marker::CuratorWrite, "__WRIT__"),
            (Marker::CuratorLease, "lease-"),
            (Marker::CuratorLatch, "latch-"),
        ] {
            let n = format!("_c_{UUID}-{text}0000000042");
            assert_eq!(parse(&n), Some((42, marker)), "{n}");
        }
    }

    #[test]
    fn parses_our_nodes() {
        let uuid = uuid::Uuid::new_v4();
        let name = format!("{}0000000003", our_prefix(&uuid, Marker::CuratorLock));
        assert_eq!(parse(&name), Some((3, Marker::CuratorLock)));
        let name = format!("{}0000000004", our_prefix(&uuid, Marker::CuratorWrite));
        assert_eq!(parse(&name), Some((4, Marker::CuratorWrite)));
    }

    #[test]
    fn parses_kazoo_nodes() {
        // kazoo: uuid4().hex + "__lock__" / "__rlock__" + sequence.
        assert_eq!(
            parse(&format!("{HEX}__lock__0000000011")),
            Some((11, Marker::KazooLock))
        );
        assert_eq!(
            parse(&format!("{HEX}__rlock__0000000012")),
            Some((12, Marker::KazooRead))
        );
        // After a 32-bit sequence overflow ZooKeeper writes `%010d` of a negative number.
        assert_eq!(
            parse(&format!("{HEX}__lock__-000000001")),
            Some((-1, Marker::KazooLock))
        );
    }

    /// Issue 31 item 10: after 2^31 child changes ZooKeeper writes 11-char
    /// negative sequences; they parse, and sort exactly as Curator's
    /// `fixForSorting` (the suffix after the marker, compared as a string)
    /// sorts them.
    #[test]
    fn wrapped_sequences_parse_and_sort_as_curator_does() {
        let suffixes = [
            "2147483646",
            "2147483647",
            "-2147483648",
            "-2147483647",
            "-1000000000",
            "-999999999",
            "-000000001",
            "0000000000",
            "0000000007",
        ];
        let values = [
            2_147_483_646,
            2_147_483_647,
            -2_147_483_648,
            -2_147_483_647,
            -1_000_000_000,
            -999_999_999,
            -1,
            0,
            7,
        ];
        let names: Vec<String> = suffixes
            .iter()
            .enumerate()
            .map(|(i, seq)| match i % 3 {
                0 => format!("_c_{UUID}-lock-{seq}"),
                1 => format!("{HEX}__lock__{seq}"),
                _ => format!("_c_{UUID}-lock-{seq}"),
            })
            .collect();
        for ((name, value), seq) in names.iter().zip(values).zip(suffixes) {
            let marker = if name.contains("__lock__") {
                Marker::KazooLock
            } else {
                Marker::CuratorLock
            };
            assert_eq!(parse(name), Some((value, marker)), "{name}");
            // And in every other recipe's shape.
            for text in ["__READ__", "__WRIT__", "lease-"] {
                let other = format!("_c_{UUID}-{text}{seq}");
                assert_eq!(parse(&other).map(|(v, _)| v), Some(value), "{other}");
            }
        }
        // Curator: `fixForSorting(name, "lock-")` is the text after the
        // last `lock-`; kazoo's key the text after `__lock__`.
        let fix_for_sorting = |name: &str| -> String {
            let marker = if name.contains("__lock__") {
                "__lock__"
            } else {
                "lock-"
            };
            let at = name.rfind(marker).unwrap() + marker.len();
            name[at..].to_string()
        };
        let mut curator: Vec<&String> = names.iter().collect();
        curator.sort_by(|a, b| fix_for_sorting(a).cmp(&fix_for_sorting(b)).then(a.cmp(b)));
        let ours = contenders(names.iter().map(String::as_str), is_mutex);
        let ours: Vec<&String> = ours.iter().map(|c| &c.name).collect();
        assert_eq!(ours, curator);
        // Spelled out: negatives first, in string order.
        let first: Vec<String> = contenders(names.iter().map(String::as_str), is_mutex)
            .iter()
            .map(|c| fix_for_sorting(&c.name))
            .collect();
        assert_eq!(
            first,
            [
                "-000000001",
                "-1000000000",
                "-2147483647",
                "-2147483648",
                "-999999999",
                "0000000000",
                "0000000007",
                "2147483646",
                "2147483647",
            ]
        );
        // A downgrade keeps an 11-character sequence.
        let w = format!("_c_{UUID}-__WRIT__-2147483648");
        let r = downgraded(&w).unwrap();
        assert_eq!(r, format!("_c_{UUID}-__READ__-2147483648"));
        assert_eq!(parse(&r), Some((-2_147_483_648, Marker::CuratorRead)));
        // Not a 32-bit counter's `%010d`: refused.
        for bad in [
            format!("_c_{UUID}-lock-2147483648"),   // above i32::MAX
            format!("_c_{UUID}-lock--2147483649"),  // below i32::MIN
            format!("_c_{UUID}-lock--0999999999"),  // 11 chars, but `%010d` gives 10
            format!("_c_{UUID}-lock-00000000001"),  // 11 digits
            format!("_c_{UUID}-lock--00000000001"), // 12 chars
            format!("_c_{UUID}-lock-+000000001"),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn ignores_other_children() {
        for other in [
            "b".to_string(),                              // a nested lock's znode
            "x-lock-0000000001".to_string(),              // a child lock named like a node
            "x__lock__0000000002".to_string(),            // likewise, kazoo-like
            "y-__WRIT__0000000003".to_string(),           // likewise, a write marker
            "lock-0000000007".to_string(),                // no protection prefix
            "leases".to_string(),                         // a semaphore's lease directory
            format!("_c_{UUID}-lock-000000001"),          // 9 digits
            format!("_c_{UUID}-lock-00000000001"),        // 11 digits
            format!("_c_{UUID}-lock-00000000a1"),         // not digits
            format!("_c_{UUID}-rlock-0000000001"),        // unknown marker
            format!("_c_{}-lock-0000000001", &UUID[1..]), // short uuid
            format!("_c_{}-lock-0000000001", UUID.to_uppercase()),
            format!("{}__lock__0000000001", &HEX[1..]), // 31 hex
            format!("{HEX}-lock-0000000001"),           // kazoo prefix, Curator marker
            format!("_c_{UUID}-__lock__0000000001"),    // Curator prefix, kazoo marker
            format!("_c_{UUID}-lock-"),                 // nothing after the marker
        ] {
            assert_eq!(parse(&other), None, "{other}");
        }
    }

    #[test]
    fn sorts_by_sequence_and_filters_by_recipe() {
        let a = format!("_c_{UUID}-lock-0000000009");
        let b = format!("{HEX}__lock__0000000002");
        let c = format!("_c_{UUID}-lock-0000000005");
        let r = format!("_c_{UUID}-__READ__0000000001");
        let sorted = contenders(
            [a.as_str(), "nested", b.as_str(), c.as_str(), r.as_str()],
            is_mutex,
        );
        let names: Vec<&str> = sorted.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [b.as_str(), c.as_str(), a.as_str()]);
        assert_eq!(sorted[0].marker, Marker::KazooLock);
    }

    #[test]
    fn a_downgraded_write_node_keeps_its_uuid_and_sequence() {
        let w = format!("_c_{UUID}-__WRIT__0000000042");
        let r = downgraded(&w).unwrap();
        assert_eq!(r, format!("_c_{UUID}-__READ__0000000042"));
        assert_eq!(parse(&r), Some((42, Marker::CuratorRead)));
        // It sorts before the write node it replaces, and so before every
        // contender that came after it.
        let later = format!("_c_{UUID}-__WRIT__0000000043");
        let order = contenders([later.as_str(), w.as_str(), r.as_str()], is_read_write);
        assert_eq!(order[0].name, r);
        assert_eq!(downgraded(&format!("_c_{UUID}-lock-0000000001")), None);
        assert_eq!(downgraded(&r), None);
    }

    /// A latch node is no contender of the mutex, read-write lock or
    /// semaphore, and theirs are none of the election's; the lock-delay
    /// marker is nobody's, and sorts after every sequence in Curator's
    /// `fixForSorting` (which keeps a name without the marker whole).
    #[test]
    fn latch_nodes_are_the_elections_alone() {
        let latch = format!("_c_{UUID}-latch-0000000001");
        let lock = format!("_c_{UUID}-lock-0000000002");
        let read = format!("_c_{UUID}-__READ__0000000003");
        let lease = format!("_c_{UUID}-lease-0000000004");
        let kazoo = format!("{HEX}__lock__0000000005");
        let all = [
            &latch,
            &lock,
            &read,
            &lease,
            &kazoo,
            &LOCK_DELAY.to_string(),
        ];
        let names = |counts: fn(Marker) -> bool| -> Vec<String> {
            contenders(all.iter().map(|s| s.as_str()), counts)
                .into_iter()
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(names(is_latch), std::slice::from_ref(&latch));
        assert!(!names(is_mutex).contains(&latch));
        assert!(!names(is_read_write).contains(&latch));
        assert!(!names(is_lease).contains(&latch));
        assert_eq!(names(is_mutex), [lock, kazoo]);
        assert_eq!(parse(LOCK_DELAY), None);
        // Curator's fixForSorting with "latch-": the marker keeps its whole
        // name, which sorts after every sequence text.
        for seq in ["9999999999", "2147483647", "-2147483648", "-000000001"] {
            assert!(LOCK_DELAY > seq, "{seq}");
        }
        assert!(!LOCK_DELAY.contains("latch-") && !LOCK_DELAY.contains("lock-"));
        let err = check_name(&LockName::new(format!("a/{LOCK_DELAY}")).unwrap()).unwrap_err();
        assert_eq!(err.kind(), lock_core::LockErrorKind::InvalidArgument);
        assert!(check_name(&LockName::new("a/lock_delay").unwrap()).is_ok());
    }

    #[test]
    fn refuses_names_with_a_contender_shaped_segment() {
        let ok = LockName::new("a/x-lock-0000000001/leases/locks").unwrap();
        assert!(check_name(&ok).is_ok());
        for bad in [
            format!("a/_c_{UUID}-lock-0000000001"),
            format!("_c_{UUID}-__READ__0000000001/b"),
            format!("a/{HEX}__rlock__0000000003/c"),
            format!("a/_c_{UUID}-latch-0000000001"),
        ] {
            let err = check_name(&LockName::new(bad.clone()).unwrap()).expect_err(&bad);
            assert_eq!(err.kind(), lock_core::LockErrorKind::InvalidArgument);
            assert!(err.to_string().contains("contender"), "{err}");
        }
    }
}

//! Contender node names: ours and Curator's `_c_<uuid>-lock-<seq>`, kazoo's
//! `<id>__lock__<seq>`, and their order.

/// The marker before the sequence number in Curator's `InterProcessMutex`
/// nodes (and ours).
pub(crate) const CURATOR_MARKER: &str = "lock-";
/// The marker before the sequence number in kazoo's `Lock` nodes.
pub(crate) const KAZOO_MARKER: &str = "__lock__";

/// The name prefix of our contender node for one acquisition: Curator's
/// protected-mode prefix `_c_<uuid>-lock-`, to which ZooKeeper appends the
/// 10-digit sequence number. The uuid finds the node again when the create
/// reply was lost.
pub(crate) fn our_prefix(uuid: &uuid::Uuid) -> String {
    format!("_c_{}-{CURATOR_MARKER}", uuid.hyphenated())
}

/// Which library's layout a contender node follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `..lock-<seq>`: Apache Curator's `InterProcessMutex`, and this crate.
    Curator,
    /// `..__lock__<seq>`: kazoo's `Lock`.
    Kazoo,
}

/// One contender child of a lock node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child's name (not the full path).
    pub name: String,
    /// Its sequence number.
    pub seq: i64,
    /// Whose layout it follows.
    pub layout: Layout,
}

/// The sequence number of a child named like a lock contender, or `None`
/// for any other child (a nested lock's node, a semaphore lease, a kazoo
/// read lock, ...).
///
/// The number is what follows the last `__lock__` (kazoo) or the last
/// `lock-` (Curator), and must be ZooKeeper's sequence suffix: 10 digits
/// (19 for 64-bit sequence numbers), possibly negative after a 32-bit
/// counter overflow.
pub(crate) fn parse(name: &str) -> Option<(i64, Layout)> {
    let kazoo = name
        .rfind(KAZOO_MARKER)
        .map(|i| (i + KAZOO_MARKER.len(), Layout::Kazoo));
    let curator = name
        .rfind(CURATOR_MARKER)
        .map(|i| (i + CURATOR_MARKER.len(), Layout::Curator));
    // The marker nearest the end owns the suffix.
    let (start, layout) = match (kazoo, curator) {
        (Some(k), Some(c)) => {
            if k.0 >= c.0 {
                k
            } else {
                c
            }
        }
        (Some(k), None) => k,
        (None, Some(c)) => c,
        (None, None) => return None,
    };
    let suffix = &name[start..];
    let digits = suffix.strip_prefix('-').unwrap_or(suffix);
    if !(digits.len() == 10 || digits.len() == 19) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse::<i64>().ok().map(|seq| (seq, layout))
}

/// The contenders among `children`, in lock order (sequence number, then
/// name): the first holds the lock, each other waits for the one before it.
pub(crate) fn contenders<I, S>(children: I) -> Vec<Contender>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut out: Vec<Contender> = children
        .into_iter()
        .filter_map(|child| {
            let name = child.into();
            parse(&name).map(|(seq, layout)| Contender { name, seq, layout })
        })
        .collect();
    out.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_curator_nodes() {
        // As Curator 5 InterProcessMutex names them (protected mode).
        let n = "_c_4e1b9a3c-2f5d-4d8e-9a43-0c6f2b1e7d55-lock-0000000042";
        assert_eq!(parse(n), Some((42, Layout::Curator)));
        // Unprotected Curator nodes are plain `lock-<seq>`.
        assert_eq!(parse("lock-0000000007"), Some((7, Layout::Curator)));
    }

    #[test]
    fn parses_our_nodes() {
        let uuid = uuid::Uuid::new_v4();
        let name = format!("{}0000000003", our_prefix(&uuid));
        assert!(name.starts_with("_c_"));
        assert_eq!(parse(&name), Some((3, Layout::Curator)));
    }

    #[test]
    fn parses_kazoo_nodes() {
        // kazoo: uuid4().hex + "__lock__" + sequence.
        let n = "8a1f0f8cb6a54f6e9d6f2c1f0a3b4c5d__lock__0000000011";
        assert_eq!(parse(n), Some((11, Layout::Kazoo)));
        // After a 32-bit sequence overflow ZooKeeper writes a negative number.
        assert_eq!(
            parse("x__lock__-2147483648"),
            Some((-2_147_483_648, Layout::Kazoo))
        );
    }

    #[test]
    fn accepts_64_bit_sequences() {
        assert_eq!(
            parse("_c_u-lock-0000000002147483648"),
            Some((2_147_483_648, Layout::Curator))
        );
    }

    #[test]
    fn ignores_other_children() {
        for other in [
            "b",                       // a nested lock's znode
            "my-lock-5",               // not a sequence suffix
            "_c_u-lease-0000000001",   // Curator semaphore lease
            "8a1f__rlock__0000000001", // kazoo read lock
            "_c_u-__READ__0000000001", // Curator read/write lock
            "x__lock__00000000a1",     // not digits
            "x-lock-00000000001",      // 11 digits
            "lock-",                   // nothing after the marker
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn sorts_mixed_layouts_by_sequence() {
        let sorted = contenders([
            "_c_b-lock-0000000005",
            "nested",
            "a1__lock__0000000002",
            "_c_a-lock-0000000009",
            "lock-0000000001",
        ]);
        let names: Vec<&str> = sorted.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "lock-0000000001",
                "a1__lock__0000000002",
                "_c_b-lock-0000000005",
                "_c_a-lock-0000000009"
            ]
        );
        assert_eq!(sorted[1].layout, Layout::Kazoo);
    }
}

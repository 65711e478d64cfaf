//! Who leads, by quorum: every node's term read at once
//! ([`Node::read_term`](crate::node::Node)), decided as soon as the
//! answers so far settle it.
//!
//! A term leads when its owner's term runs on a quorum of nodes. Its value
//! is the one with the highest proclaim number among them: a proclaim
//! that succeeded reached a quorum, and any two quorums share a node, so
//! every read after it sees it (one that failed may be seen by some reads
//! and not others, as its outcome was unknown). Nobody leads when no owner
//! can have a quorum even counting every node that did not answer; when
//! the silent nodes could still make one, the read fails (`Unavailable`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lock_core::{LeaderInfo, LockError, Result};
use lock_redis::kit::layout::LeaderKeys;

use super::scripts::NodeTerm;
use crate::fan_out::{fan_out, finish_in_background, next_by};
use crate::inner::Inner;

/// What a quorum read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The leader, if a term runs on a quorum.
    pub(crate) leader: Option<LeaderInfo>,
    /// How long a quorum of nodes keeps that term at least, unless renewed
    /// (`None`: no leader, or keys without expiry).
    pub(crate) lasts: Option<Duration>,
}

/// Reads the election of `keys` on every node, each bounded by the larger
/// of the connect and node timeouts (a follower may be the first request
/// on a connection).
pub(crate) async fn read(inner: &Arc<Inner>, keys: &Arc<LeaderKeys>) -> Result<Seen> {
    let (n, limit) = (inner.nodes.len(), inner.background_bound());
    let deadline = lock_core::backend::add_saturating(tokio::time::Instant::now(), limit);
    let mut pending = {
        let keys = keys.clone();
        fan_out(inner, inner.all(), limit, move |inner, i| {
            let keys = keys.clone();
            async move { inner.nodes[i].read_term(&keys).await }
        })
    };
    let (mut terms, mut answered, mut failures) = (Vec::new(), 0, Vec::new());
    while let Some((_, r)) = next_by(&mut pending, deadline).await {
        match r {
            Ok(term) => {
                answered += 1;
                terms.extend(term);
            }
            Err(f) => failures.push(f),
        }
        if let Some(seen) = decide(&terms, n - answered, inner.quorum) {
            finish_in_background(pending);
            return Ok(seen);
        }
    }
    finish_in_background(pending);
    Err(LockError::unavailable(format!(
        "redlock: who leads {} could not be told: {answered} of {n} nodes answered, and the others could \
         still make a quorum of {}",
        keys.leader(),
        inner.quorum
    ))
    .with_nodes(failures))
}

/// What `terms` (the terms found so far; the nodes that answered without
/// one are not in it) tell with `unheard` nodes still to answer, if they
/// settle it.
fn decide(terms: &[NodeTerm], unheard: usize, quorum: usize) -> Option<Seen> {
    let mut undecided = unheard >= quorum;
    for owner in terms.iter().map(|t| &t.owner) {
        let mine: Vec<&NodeTerm> = terms.iter().filter(|t| &t.owner == owner).collect();
        if mine.len() >= quorum {
            return Some(leading(mine, quorum));
        }
        undecided |= mine.len() + unheard >= quorum;
    }
    (!undecided).then_some(Seen {
        leader: None,
        lasts: None,
    })
}

/// The term of `mine` (one owner's, on at least `quorum` nodes).
fn leading(mine: Vec<&NodeTerm>, quorum: usize) -> Seen {
    let Some(latest) = mine.iter().max_by_key(|t| t.proclaims) else {
        return Seen {
            leader: None,
            lasts: None,
        };
    };
    let since = SystemTime::UNIX_EPOCH + Duration::from_millis(latest.since_ms);
    let mut pttls: Vec<i64> = mine.iter().map(|t| t.pttl).collect();
    // Longest first, no expiry (-1) longest of all: the quorum-th keeps
    // the term on a quorum that long.
    pttls.sort_by_key(|p| std::cmp::Reverse(if *p < 0 { i64::MAX } else { *p }));
    let lasts = pttls
        .get(quorum - 1)
        .and_then(|p| u64::try_from(*p).ok())
        .map(Duration::from_millis);
    Seen {
        leader: Some(LeaderInfo::new(latest.value.clone(), None).with_since(since)),
        lasts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(owner: &str, proclaims: u64, pttl: i64, value: &str) -> NodeTerm {
        NodeTerm {
            owner: owner.into(),
            proclaims,
            since_ms: 1_000,
            pttl,
            value: value.into(),
        }
    }

    #[test]
    fn a_quorum_of_one_owner_leads_with_its_latest_value() {
        let terms = [
            term("a", 0, 900, "v0"),
            term("a", 1, 800, "v1"),
            term("a", 0, 700, "v0"),
        ];
        let seen = decide(&terms, 2, 3).expect("decided");
        let leader = seen.leader.expect("a leads");
        assert_eq!(leader.value, "v1");
        assert_eq!(leader.epoch, None, "no epochs on Redlock");
        assert_eq!(seen.lasts, Some(Duration::from_millis(700)));
    }

    #[test]
    fn nobody_leads_only_when_the_silent_nodes_cannot_make_a_quorum() {
        // Two nodes have a's term, two have none, one is silent: a may
        // still lead through the silent one.
        let terms = [term("a", 0, 900, "v"), term("a", 0, 900, "v")];
        assert_eq!(decide(&terms, 1, 3), None);
        // Every node answered: a's term has not begun on a quorum.
        assert_eq!(
            decide(&terms, 0, 3),
            Some(Seen {
                leader: None,
                lasts: None
            })
        );
        // Three silent nodes could hold anyone's term.
        assert_eq!(decide(&[], 3, 3), None);
        assert!(decide(&[], 2, 3).is_some_and(|s| s.leader.is_none()));
    }

    #[test]
    fn split_owners_lead_nowhere() {
        let terms = [
            term("a", 0, 900, "v"),
            term("a", 0, 900, "v"),
            term("b", 0, 900, "w"),
            term("b", 0, 900, "w"),
        ];
        assert_eq!(decide(&terms, 1, 3), None, "the fifth node decides");
        assert!(decide(&terms[..3], 0, 3).is_some_and(|s| s.leader.is_none()));
    }
}

//! Counting toward a quorum: the nodes' answers to one request sent to
//! every node ([`Tally`]), and sets of nodes as bits ([`node_bit`]).
//!
//! Every decision of the backend that depends on a quorum reads its
//! answers into a [`Tally`] and asks it one of three questions:
//! [`reached`](Tally::reached) (a quorum said yes),
//! [`refused`](Tally::refused) (so many said no that no quorum can say yes)
//! and [`out_of_reach`](Tally::out_of_reach) (the yeses and the nodes still
//! to answer are fewer than a quorum).

/// The answers of the nodes to one request sent to each of them, counted
/// toward a quorum.
///
/// Each node is counted once, when its answer comes:
/// [`said_yes`](Self::said_yes) (it did what was asked: took, extended or
/// deleted the key, or answered a read), [`said_no`](Self::said_no) (it
/// answered and refused: the key is someone else's, or gone),
/// [`failed`](Self::failed) (an error or a timeout: it may or may not have
/// done it), or [`skipped`](Self::skipped) (its answer is not waited for
/// here). A node not counted yet is *unheard*.
#[derive(Clone, Debug)]
pub(crate) struct Tally {
    /// How many yeses make a quorum.
    quorum: usize,
    /// Per node: counted already.
    heard: Vec<bool>,
    /// How many said yes.
    yes: usize,
    /// How many said no.
    no: usize,
}

impl Tally {
    /// No answer yet from any of `nodes` nodes; `quorum` yeses decide.
    pub(crate) fn new(nodes: usize, quorum: usize) -> Self {
        Self {
            quorum,
            heard: vec![false; nodes],
            yes: 0,
            no: 0,
        }
    }

    /// Node `i` said yes.
    pub(crate) fn said_yes(&mut self, i: usize) {
        self.heard[i] = true;
        self.yes += 1;
    }

    /// Node `i` answered no.
    pub(crate) fn said_no(&mut self, i: usize) {
        self.heard[i] = true;
        self.no += 1;
    }

    /// Node `i` failed: an error, or no answer within its bound.
    pub(crate) fn failed(&mut self, i: usize) {
        self.heard[i] = true;
    }

    /// Node `i` is not waited for (it is asked elsewhere, later): it is no
    /// longer unheard, and counts as neither yes nor no.
    pub(crate) fn skipped(&mut self, i: usize) {
        self.heard[i] = true;
    }

    /// How many nodes said yes.
    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    /// How many nodes said no.
    pub(crate) fn no(&self) -> usize {
        self.no
    }

    /// How many nodes answered, yes or no (not those that failed).
    pub(crate) fn answered(&self) -> usize {
        self.yes + self.no
    }

    /// A quorum of nodes answered, yes or no.
    pub(crate) fn quorum_answered(&self) -> bool {
        self.answered() >= self.quorum
    }

    /// A quorum said yes.
    pub(crate) fn reached(&self) -> bool {
        self.yes >= self.quorum
    }

    /// So many nodes said no that the others (failed, unheard or skipped
    /// included) are fewer than a quorum: no quorum can say yes.
    pub(crate) fn refused(&self) -> bool {
        self.no + self.quorum > self.heard.len()
    }

    /// The yeses and the nodes still unheard are fewer than a quorum: the
    /// answers still to come cannot make one.
    pub(crate) fn out_of_reach(&self) -> bool {
        self.yes + self.unheard().count() < self.quorum
    }

    /// The nodes not counted yet, in node order.
    pub(crate) fn unheard(&self) -> impl Iterator<Item = usize> + '_ {
        self.heard
            .iter()
            .enumerate()
            .filter(|(_, h)| !**h)
            .map(|(i, _)| i)
    }
}

/// Bit `i` of a node set (nodes past the 64th are left out).
pub(crate) fn node_bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One node's answer, as a test plays it.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Yes,
        No,
        Failed,
        Skipped,
    }

    const ANSWERS: [Answer; 4] = [Answer::Yes, Answer::No, Answer::Failed, Answer::Skipped];

    fn count(t: &mut Tally, i: usize, a: Answer) {
        match a {
            Answer::Yes => t.said_yes(i),
            Answer::No => t.said_no(i),
            Answer::Failed => t.failed(i),
            Answer::Skipped => t.skipped(i),
        }
    }

    /// `n` nodes with the quorum of a Redlock over them.
    fn tally(n: usize) -> Tally {
        Tally::new(n, n / 2 + 1)
    }

    #[test]
    fn five_nodes_decide_at_three() {
        let mut t = tally(5);
        t.said_yes(0);
        t.said_yes(3);
        assert!(!t.reached() && !t.refused() && !t.out_of_reach());
        t.said_yes(4);
        assert!(t.reached(), "3 of 5 is a quorum");

        let mut t = tally(5);
        t.said_no(1);
        t.said_no(2);
        assert!(!t.refused(), "3 nodes may still say yes");
        t.said_no(0);
        assert!(t.refused() && t.out_of_reach());
    }

    #[test]
    fn four_nodes_need_three_and_two_refusals_decide() {
        let mut t = tally(4);
        t.said_yes(0);
        t.said_yes(1);
        assert!(!t.reached(), "2 of 4 is no quorum");
        t.said_no(2);
        assert!(!t.refused() && !t.out_of_reach(), "node 3 may make it 3");
        t.said_yes(3);
        assert!(t.reached());

        let mut t = tally(4);
        t.said_no(0);
        assert!(!t.refused());
        t.said_no(3);
        assert!(t.refused(), "only 2 of 4 may still say yes");
        assert!(t.out_of_reach());
        t.said_yes(1);
        t.said_yes(2);
        assert!(!t.reached(), "the yeses after a refusal make no quorum");
    }

    #[test]
    fn a_failure_is_no_refusal_but_puts_a_quorum_out_of_reach() {
        let mut t = tally(5);
        t.failed(0);
        t.failed(1);
        assert!(!t.out_of_reach());
        t.failed(2);
        assert!(!t.refused(), "a node that failed may hold the key");
        assert!(t.out_of_reach(), "two nodes left cannot make three yeses");
        assert_eq!(t.answered(), 0);
    }

    #[test]
    fn a_quorum_out_of_reach_can_still_be_short_of_answers() {
        // What a round waits for: out of reach, and a quorum answered.
        let mut t = tally(5);
        t.failed(0);
        t.failed(1);
        t.said_no(2);
        assert!(t.out_of_reach());
        assert_eq!(t.answered(), 1, "the unheard nodes may still answer");
        t.said_no(3);
        t.said_no(4);
        assert_eq!(t.answered(), 3);
    }

    #[test]
    fn skipped_nodes_are_not_unheard_and_count_as_neither() {
        let mut t = tally(5);
        t.skipped(1);
        t.skipped(3);
        assert_eq!(t.unheard().collect::<Vec<_>>(), [0, 2, 4]);
        t.said_no(0);
        t.said_no(2);
        assert!(!t.refused(), "the skipped nodes may hold the key");
        t.said_no(4);
        assert!(t.refused());
        assert_eq!(t.unheard().count(), 0);
    }

    #[test]
    fn one_node_is_its_own_quorum_and_two_need_both() {
        let mut t = tally(1);
        t.said_yes(0);
        assert!(t.reached());
        let mut t = tally(1);
        t.said_no(0);
        assert!(t.refused());

        let mut t = tally(2);
        t.said_yes(0);
        assert!(!t.reached());
        t.said_no(1);
        assert!(t.refused() && t.out_of_reach());
    }

    /// Every answer of every node, in every order of up to 7 nodes: each
    /// question is the count it stands for.
    #[test]
    fn each_question_is_its_count_for_any_answers_in_any_order() {
        for n in 1..=7usize {
            let quorum = n / 2 + 1;
            // Each answer sequence of length n over ANSWERS, the nodes in
            // a rotated order.
            let sequences = ANSWERS.len().pow(u32::try_from(n).unwrap());
            for code in 0..sequences {
                let mut t = tally(n);
                let (mut yes, mut no, mut heard) = (0usize, 0usize, 0usize);
                let mut silent = vec![true; n];
                let mut rest = code;
                for step in 0..n {
                    let a = ANSWERS[rest % ANSWERS.len()];
                    rest /= ANSWERS.len();
                    let i = (step + code) % n;
                    count(&mut t, i, a);
                    heard += 1;
                    silent[i] = false;
                    match a {
                        Answer::Yes => yes += 1,
                        Answer::No => no += 1,
                        Answer::Failed | Answer::Skipped => {}
                    }
                    assert_eq!(t.yes(), yes);
                    assert_eq!(t.answered(), yes + no);
                    assert_eq!(t.no(), no);
                    assert_eq!(t.quorum_answered(), yes + no >= quorum);
                    assert_eq!(t.reached(), yes >= quorum);
                    assert_eq!(t.refused(), no > n - quorum, "n {n} code {code}");
                    assert_eq!(t.out_of_reach(), yes + (n - heard) < quorum);
                    let unheard: Vec<usize> = (0..n).filter(|&i| silent[i]).collect();
                    assert_eq!(t.unheard().collect::<Vec<_>>(), unheard);
                    assert!(
                        !(t.reached() && t.refused()),
                        "a quorum of yeses and of noes at once"
                    );
                    assert!(!(t.reached() && t.out_of_reach()));
                }
            }
        }
    }

    #[test]
    fn node_bits() {
        assert_eq!(node_bit(0), 1);
        assert_eq!(node_bit(5), 0b10_0000);
        assert_eq!(node_bit(63), 1 << 63);
        assert_eq!(node_bit(64), 0, "past the 64th node: left out");
    }
}

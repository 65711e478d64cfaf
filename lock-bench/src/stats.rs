//! Statistics: percentiles of latency samples and the hand-off analysis of a
//! contended run.

use std::time::{Duration, Instant};

use serde::Serialize;

/// The percentiles drawn in the plot, in percent.
pub const PLOT_PERCENTILES: [f64; 6] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// The nearest-rank percentile `q` (0..=100) of `sorted` (ascending): the
/// smallest sample such that at least `q`% of the samples are at or below it.
/// `None` for no samples.
pub fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 100.0);
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A latency distribution in milliseconds, with the number of samples behind it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// The percentiles of [`PLOT_PERCENTILES`], for the plot.
    pub curve_ms: Vec<(f64, f64)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Summary {
    /// Summarises `samples` (sorted in place); `None` when empty.
    pub fn of(samples: &mut [Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let p = |q| ms(percentile(samples, q).unwrap_or_default());
        let total: Duration = samples.iter().sum();
        Some(Summary {
            n: samples.len(),
            p50_ms: p(50.0),
            p90_ms: p(90.0),
            p99_ms: p(99.0),
            max_ms: ms(samples[samples.len() - 1]),
            mean_ms: ms(total) / samples.len() as f64,
            curve_ms: PLOT_PERCENTILES.iter().map(|&q| (q, p(q))).collect(),
        })
    }
}

/// One holding of the contended lock, as the holder saw it on the one
/// monotonic clock of the benchmark process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    /// Which contender (client) held it.
    pub client: usize,
    /// When it called acquire.
    pub requested: Instant,
    /// When acquire returned the lock.
    pub acquired: Instant,
    /// When it called release.
    pub release_started: Instant,
}

/// What a sequence of holdings of one lock says about hand-offs.
#[derive(Clone, Debug, PartialEq)]
pub struct Handoffs {
    /// Hand-off latencies: from a holder calling release to the next holder's
    /// acquire returning.
    pub latencies: Vec<Duration>,
    /// How many hand-offs went to a different client than the releaser.
    pub to_other: usize,
    /// Waits: from calling acquire to holding.
    pub waits: Vec<Duration>,
    /// Holdings that began before the previous holder started to release
    /// (mutual exclusion violated, as seen by the clients).
    pub overlaps: usize,
}

impl Handoffs {
    /// The share of hand-offs that went to another client (0..=1); `None`
    /// when there was no hand-off.
    pub fn share_to_other(&self) -> Option<f64> {
        (!self.latencies.is_empty() || self.overlaps > 0)
            .then(|| self.to_other as f64 / (self.latencies.len() + self.overlaps) as f64)
    }

    /// The longest wait.
    pub fn longest_wait(&self) -> Option<Duration> {
        self.waits.iter().max().copied()
    }
}

/// Orders the holdings by the time they were granted and pairs each with the
/// next one: every consecutive pair is one hand-off (to a waiter, or back to
/// the releaser if it re-took the lock first).
pub fn handoffs(mut holdings: Vec<Holding>) -> Handoffs {
    holdings.sort_by_key(|h| h.acquired);
    let mut out = Handoffs {
        latencies: Vec::with_capacity(holdings.len()),
        to_other: 0,
        waits: holdings.iter().map(|h| h.acquired - h.requested).collect(),
        overlaps: 0,
    };
    for pair in holdings.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if next.client != prev.client {
            out.to_other += 1;
        }
        match next.acquired.checked_duration_since(prev.release_started) {
            Some(latency) => out.latencies.push(latency),
            None => out.overlaps += 1,
        }
    }
    out
}

/// Operations per second: `count` over `elapsed`.
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        count as f64 / elapsed.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_d(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn percentile_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(ms_d).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(ms_d(50)));
        assert_eq!(percentile(&sorted, 90.0), Some(ms_d(90)));
        assert_eq!(percentile(&sorted, 99.0), Some(ms_d(99)));
        assert_eq!(percentile(&sorted, 99.9), Some(ms_d(100)));
        assert_eq!(percentile(&sorted, 100.0), Some(ms_d(100)));
        assert_eq!(percentile(&sorted, 0.0), Some(ms_d(1)));
        assert_eq!(percentile(&[], 50.0), None);
        // Small samples: the median of 4 is the 2nd, p99 of 4 is the largest.
        let four = [ms_d(1), ms_d(2), ms_d(3), ms_d(4)];
        assert_eq!(percentile(&four, 50.0), Some(ms_d(2)));
        assert_eq!(percentile(&four, 99.0), Some(ms_d(4)));
        assert_eq!(percentile(&[ms_d(7)], 50.0), Some(ms_d(7)));
    }

    #[test]
    fn summary_sorts_and_counts() {
        let mut samples = vec![ms_d(5), ms_d(1), ms_d(3), ms_d(2), ms_d(4)];
        let s = Summary::of(&mut samples).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.p50_ms, 3.0);
        assert_eq!(s.p99_ms, 5.0);
        assert_eq!(s.max_ms, 5.0);
        assert!((s.mean_ms - 3.0).abs() < 1e-9);
        assert_eq!(s.curve_ms.len(), PLOT_PERCENTILES.len());
        assert!(Summary::of(&mut []).is_none());
    }

    fn holding(base: Instant, client: usize, req: u64, acq: u64, rel: u64) -> Holding {
        Holding {
            client,
            requested: base + ms_d(req),
            acquired: base + ms_d(acq),
            release_started: base + ms_d(rel),
        }
    }

    #[test]
    fn handoff_latency_fairness_and_waits() {
        let t = Instant::now();
        // Given out of order: the analysis sorts by acquisition.
        let hs = vec![
            holding(t, 1, 0, 12, 15),  // B waited from 0, got it 2 ms after A's release
            holding(t, 0, 0, 1, 10),   // A
            holding(t, 1, 15, 16, 20), // B re-took its own lock 1 ms after releasing it
            holding(t, 2, 1, 23, 30),  // C got it 3 ms after A's release
        ];
        let h = handoffs(hs);
        assert_eq!(h.latencies, vec![ms_d(2), ms_d(1), ms_d(3)]);
        assert_eq!(h.to_other, 2);
        assert_eq!(h.overlaps, 0);
        assert!((h.share_to_other().unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(h.longest_wait(), Some(ms_d(22)));
        let mut waits = h.waits.clone();
        waits.sort();
        assert_eq!(waits, vec![ms_d(1), ms_d(1), ms_d(12), ms_d(22)]);
    }

    #[test]
    fn handoff_detects_overlap() {
        let t = Instant::now();
        // B holds from 5 while A only starts releasing at 10: exclusion broken.
        let h = handoffs(vec![holding(t, 0, 0, 1, 10), holding(t, 1, 0, 5, 12)]);
        assert_eq!(h.overlaps, 1);
        assert!(h.latencies.is_empty());
        assert_eq!(h.share_to_other(), Some(1.0));
    }

    #[test]
    fn handoff_of_nothing() {
        let h = handoffs(Vec::new());
        assert!(h.latencies.is_empty());
        assert_eq!(h.share_to_other(), None);
        assert_eq!(h.longest_wait(), None);
        let one = handoffs(vec![holding(Instant::now(), 0, 0, 1, 2)]);
        assert_eq!(one.share_to_other(), None);
        assert_eq!(one.longest_wait(), Some(ms_d(1)));
    }

    #[test]
    fn rates() {
        assert_eq!(rate(10, Duration::from_secs(2)), 5.0);
        assert_eq!(rate(10, Duration::ZERO), 0.0);
    }
}

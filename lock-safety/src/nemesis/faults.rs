//! The faults of a nemesis run, chosen from a seed, and how each is done to
//! real servers and to the clients' proxies.
//!
//! A schedule is a sequence of steps: a fault, how long it lasts, a quiet
//! gap. The same seed gives the same schedule (printed at the start of a
//! run), so a failing seed replays its faults; the interleaving of the
//! clients' requests with them is the machine's.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_testbed::Persistence;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fixture::{Kind, Proxied, Servers, Started};

use super::history::History;

/// A server member: a fixed one, or whichever leads when the fault starts
/// (etcd, ZooKeeper; member 0 elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    /// Member `i`.
    At(usize),
    /// The leader when the fault starts.
    Leader,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Member::At(i) => write!(f, "member {i}"),
            Member::Leader => f.write_str("the leader"),
        }
    }
}

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Both directions of one client's link to a member delayed by more than
    /// the request timeout: the client gives up and resends, and the first
    /// copy still arrives.
    Latency {
        /// The client.
        client: usize,
        /// The member its link leads to.
        member: Member,
        /// The delay of each direction.
        delay: Duration,
    },
    /// One client's link to a member passes requests and swallows every
    /// answer: replies lost after the server applied the request.
    DropReplies {
        /// The client.
        client: usize,
        /// The member.
        member: Member,
    },
    /// One client's link to a member swallows requests (one-way partition).
    DropRequests {
        /// The client.
        client: usize,
        /// The member.
        member: Member,
    },
    /// One client's link to a member swallows both directions.
    Blackhole {
        /// The client.
        client: usize,
        /// The member.
        member: Member,
    },
    /// One client's connections to a member are reset every `every`, in the
    /// middle of whatever request is in flight.
    Resets {
        /// The client.
        client: usize,
        /// The member.
        member: Member,
        /// How often.
        every: Duration,
    },
    /// What the servers send one client's pub/sub connections arrives
    /// `delay` late (Redis and Redlock wake-ups), on every member.
    SubscriberDelay {
        /// The client.
        client: usize,
        /// The delay.
        delay: Duration,
    },
    /// Every pub/sub message the servers send one client arrives twice, the
    /// copy `after` later (Redis and Redlock wake-ups replayed).
    ReplayMessages {
        /// The client.
        client: usize,
        /// How much later the copy comes.
        after: Duration,
    },
    /// A member is paused (SIGSTOP) and resumed at the end.
    Pause {
        /// The member.
        member: Member,
    },
    /// A member is killed (SIGKILL) and started again at the end, with its
    /// data (what a single Redis keeps depends on its persistence).
    Kill {
        /// The member.
        member: Member,
    },
    /// A ZooKeeper follower is cut from its leader (its quorum link
    /// blackholed) while its clients stay connected to it.
    IsolateFollower {
        /// The follower (a member that is not the leader when it starts).
        follower: usize,
    },
}

impl Fault {
    /// A short name of its kind, for the report's counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Latency { .. } => "latency above the timeout",
            Fault::DropReplies { .. } => "replies lost after apply",
            Fault::DropRequests { .. } => "one-way blackhole (requests)",
            Fault::Blackhole { .. } => "two-way blackhole",
            Fault::Resets { .. } => "connection resets",
            Fault::SubscriberDelay { .. } => "pub/sub delay",
            Fault::ReplayMessages { .. } => "pub/sub messages delivered twice",
            Fault::Pause { .. } => "member paused",
            Fault::Kill { .. } => "member killed and restarted",
            Fault::IsolateFollower { .. } => "follower cut from the leader",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Latency {
                client,
                member,
                delay,
            } => write!(
                f,
                "client {client}: link to {member} delayed {} ms each way",
                delay.as_millis()
            ),
            Fault::DropReplies { client, member } => {
                write!(f, "client {client}: replies from {member} dropped")
            }
            Fault::DropRequests { client, member } => {
                write!(f, "client {client}: requests to {member} dropped")
            }
            Fault::Blackhole { client, member } => {
                write!(f, "client {client}: link to {member} blackholed")
            }
            Fault::Resets {
                client,
                member,
                every,
            } => write!(
                f,
                "client {client}: connections to {member} reset every {} ms",
                every.as_millis()
            ),
            Fault::SubscriberDelay { client, delay } => write!(
                f,
                "client {client}: pub/sub messages {} ms late",
                delay.as_millis()
            ),
            Fault::ReplayMessages { client, after } => write!(
                f,
                "client {client}: pub/sub messages delivered again {} ms later",
                after.as_millis()
            ),
            Fault::Pause { member } => write!(f, "{member} paused"),
            Fault::Kill { member } => write!(f, "{member} killed"),
            Fault::IsolateFollower { follower } => {
                write!(f, "follower {follower} cut from the leader")
            }
        }
    }
}

/// One step of a schedule: a fault held for `lasts`, then `gap` of quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The fault.
    pub fault: Fault,
    /// How long it is held.
    pub lasts: Duration,
    /// The quiet time after it is healed.
    pub gap: Duration,
}

/// The shape of a run, which bounds what a schedule may do.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The backend.
    pub kind: Kind,
    /// Clients of the workload.
    pub clients: usize,
    /// Server members.
    pub members: usize,
    /// How long faults go on.
    pub duration: Duration,
    /// The longest lease the workload asks for (with its extensions).
    pub max_ttl: Duration,
}

/// The faults of one run, from its seed.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The seed it came from.
    pub seed: u64,
    /// What a single Redis persists in this run (other backends: `None`).
    pub persistence: Persistence,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The schedule of `seed` for a run of `shape`: steps until the
    /// duration is used up. Each fault is one the backend's documented
    /// assumptions allow (see [`Schedule::excuses_overlaps`]): a Redlock
    /// node is restarted no sooner than the longest lease after it died.
    pub fn generate(seed: u64, shape: Shape) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let persistence = match shape.kind {
            Kind::Redis => match rng.random_range(0..4) {
                0 => Persistence::None,
                1 => Persistence::Snapshots,
                2 => Persistence::AofEverySec,
                _ => Persistence::AofAlways,
            },
            _ => Persistence::None,
        };
        let mut steps = Vec::new();
        let mut used = Duration::ZERO;
        while used < shape.duration {
            let step = random_step(&mut rng, shape);
            used += step.lasts + step.gap;
            steps.push(step);
        }
        Schedule {
            seed,
            persistence,
            steps,
        }
    }

    /// Whether the backend's documented guarantees allow two holders after
    /// a member of this run is killed: a single Redis that does not write
    /// every change to disk before answering loses recent grants on a
    /// restart (tokens stay ordered by the server clock, so fencing still
    /// holds). Such overlaps are reported apart, not as violations.
    pub fn excuses_overlaps(&self, kind: Kind) -> bool {
        kind == Kind::Redis && self.persistence != Persistence::AofAlways
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} ({} steps, redis persistence {:?})",
            self.seed,
            self.steps.len(),
            self.persistence
        )?;
        let mut at = Duration::ZERO;
        for s in &self.steps {
            writeln!(
                f,
                "  {:>6} ms  {} for {} ms",
                at.as_millis(),
                s.fault,
                s.lasts.as_millis()
            )?;
            at += s.lasts + s.gap;
        }
        Ok(())
    }
}

fn millis(rng: &mut StdRng, from: Duration, to: Duration) -> Duration {
    let (a, b) = (from.as_millis() as u64, to.as_millis() as u64);
    Duration::from_millis(rng.random_range(a..=b.max(a)))
}

fn random_step(rng: &mut StdRng, shape: Shape) -> Step {
    let timeout = shape.kind.request_timeout();
    let client = rng.random_range(0..shape.clients);
    let member = if shape.members > 1 && rng.random_bool(0.5) {
        Member::At(rng.random_range(0..shape.members))
    } else {
        Member::Leader
    };
    let pubsub = matches!(shape.kind, Kind::Redis | Kind::Redlock);
    let zk = shape.kind == Kind::Zk;
    let link = Duration::from_millis(300)..=Duration::from_millis(3000);
    let (fault, lasts) = loop {
        let fault = match rng.random_range(0..10) {
            0 | 1 => Fault::Latency {
                client,
                member,
                delay: millis(rng, timeout * 6 / 5, timeout * 4),
            },
            2 => Fault::DropReplies { client, member },
            3 => Fault::DropRequests { client, member },
            4 => Fault::Blackhole { client, member },
            5 => Fault::Resets {
                client,
                member,
                every: millis(rng, Duration::from_millis(20), Duration::from_millis(300)),
            },
            6 if pubsub => Fault::SubscriberDelay {
                client,
                delay: millis(rng, timeout * 2, shape.max_ttl),
            },
            6 if zk => Fault::IsolateFollower {
                follower: rng.random_range(0..shape.members),
            },
            7 => Fault::Pause { member },
            8 => Fault::Kill { member },
            9 if pubsub => Fault::ReplayMessages {
                client,
                after: millis(rng, Duration::from_millis(1), shape.max_ttl),
            },
            9 if zk => Fault::IsolateFollower {
                follower: rng.random_range(0..shape.members),
            },
            _ => continue,
        };
        let lasts = match fault {
            // A Redlock node comes back no sooner than the longest lease
            // after it died (its documented assumption: it has no data).
            Fault::Kill { .. } if shape.kind == Kind::Redlock => millis(
                rng,
                shape.max_ttl + Duration::from_millis(200),
                shape.max_ttl * 2,
            ),
            Fault::Kill { .. } => {
                millis(rng, Duration::from_millis(100), Duration::from_millis(2500))
            }
            Fault::Pause { .. } => millis(rng, Duration::from_millis(200), shape.max_ttl * 2),
            Fault::IsolateFollower { .. } => {
                millis(rng, Duration::from_millis(500), shape.max_ttl * 2)
            }
            _ => millis(rng, *link.start(), *link.end()),
        };
        break (fault, lasts);
    };
    Step {
        fault,
        lasts,
        gap: millis(rng, Duration::from_millis(100), Duration::from_millis(1500)),
    }
}

/// The servers and the clients' proxies that faults are done to.
pub struct Target {
    /// The servers (locked while a member is killed or restarted).
    pub servers: Arc<Mutex<Servers>>,
    /// The workload's clients, each behind its own proxies.
    pub clients: Vec<Arc<Proxied>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Target {
    fn member(&self, m: Member) -> usize {
        match m {
            Member::At(i) => i,
            Member::Leader => lock(&self.servers).leader(),
        }
    }

    /// Runs `schedule` to its end (or until `stop`), recording each fault in
    /// `history`, and heals everything before returning.
    pub async fn run(&self, schedule: &Schedule, history: &History, stop: &tokio::sync::Notify) {
        for step in &schedule.steps {
            let fault = blocking(|| self.resolve(step.fault));
            let expired_before = blocking(|| self.leases_expired(fault));
            let record = history.fault(step.fault.to_string());
            let undo = blocking(|| self.apply(fault));
            let deadline = tokio::time::Instant::now() + step.lasts;
            let stopped = match step.fault {
                Fault::Resets {
                    client,
                    member,
                    every,
                } => {
                    let proxy = self.member(member);
                    let stopped = loop {
                        tokio::select! {
                            () = stop.notified() => break true,
                            () = tokio::time::sleep(every) => {}
                        }
                        if tokio::time::Instant::now() >= deadline {
                            break false;
                        }
                        self.clients[client].proxies[proxy].reset_all();
                    };
                    stopped
                }
                _ => tokio::select! {
                    () = stop.notified() => true,
                    () = tokio::time::sleep_until(deadline) => false,
                },
            };
            blocking(|| undo.heal(self));
            history.healed(record);
            if let Some((member, before)) = expired_before {
                self.note_revocations(member, before, history).await;
            }
            if stopped {
                return;
            }
            tokio::select! {
                () = stop.notified() => return,
                () = tokio::time::sleep(step.gap) => {}
            }
        }
    }

    /// `fault` with "the leader" replaced by the member that leads now.
    fn resolve(&self, fault: Fault) -> Fault {
        let at = |m: Member| Member::At(self.member(m));
        match fault {
            Fault::Latency {
                client,
                member,
                delay,
            } => Fault::Latency {
                client,
                member: at(member),
                delay,
            },
            Fault::DropReplies { client, member } => Fault::DropReplies {
                client,
                member: at(member),
            },
            Fault::DropRequests { client, member } => Fault::DropRequests {
                client,
                member: at(member),
            },
            Fault::Blackhole { client, member } => Fault::Blackhole {
                client,
                member: at(member),
            },
            Fault::Resets {
                client,
                member,
                every,
            } => Fault::Resets {
                client,
                member: at(member),
                every,
            },
            Fault::Pause { member } => Fault::Pause { member: at(member) },
            Fault::Kill { member } => Fault::Kill { member: at(member) },
            other => other,
        }
    }

    /// For a pause of an etcd member: the member and how many leases its
    /// expiry loop has revoked so far (`etcd_debugging_server_lease_expired_total`).
    fn leases_expired(&self, fault: Fault) -> Option<(usize, u64)> {
        let Fault::Pause {
            member: Member::At(i),
        } = fault
        else {
            return None;
        };
        let servers = lock(&self.servers);
        let Started::Etcd(etcd) = servers.typed() else {
            return None;
        };
        Some((i, leases_expired(&etcd.endpoint(i))?))
    }

    /// After etcd member `member` resumed: if its expiry loop revoked leases
    /// meanwhile (an etcd before 3.4.31 and 3.5.13 whose frozen leader
    /// resumes revokes live leases, etcd-io/etcd#15247), records that in
    /// the history, at the moment it resumed.
    async fn note_revocations(&self, member: usize, before: u64, history: &History) {
        let resumed = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let endpoint = match lock(&self.servers).typed() {
            Started::Etcd(etcd) => etcd.endpoint(member),
            _ => return,
        };
        let Some(after) = blocking(|| leases_expired(&endpoint)) else {
            return;
        };
        if after > before {
            history.server_event(
                resumed,
                format!(
                    "{REVOKED_ON_RESUME}: member {member} revoked {} leases when it resumed",
                    after - before
                ),
            );
        }
    }

    /// Does `fault`; returns how to heal it.
    fn apply(&self, fault: Fault) -> Undo {
        match fault {
            Fault::Latency {
                client,
                member,
                delay,
            } => {
                let i = self.member(member);
                self.clients[client].proxies[i].set_latency(delay);
                Undo::Link(client, i)
            }
            Fault::DropReplies { client, member } => {
                let i = self.member(member);
                self.clients[client].proxies[i].drop_replies();
                Undo::Link(client, i)
            }
            Fault::DropRequests { client, member } => {
                let i = self.member(member);
                self.clients[client].proxies[i].drop_requests();
                Undo::Link(client, i)
            }
            Fault::Blackhole { client, member } => {
                let i = self.member(member);
                self.clients[client].proxies[i].blackhole();
                Undo::Link(client, i)
            }
            Fault::Resets { client, member, .. } => {
                let i = self.member(member);
                self.clients[client].proxies[i].reset_all();
                Undo::Nothing
            }
            Fault::SubscriberDelay { client, delay } => {
                for p in &self.clients[client].proxies {
                    p.set_subscriber_delay(delay);
                }
                Undo::Client(client)
            }
            Fault::ReplayMessages { client, after } => {
                for p in &self.clients[client].proxies {
                    p.replay_messages(after);
                }
                Undo::Client(client)
            }
            Fault::Pause { member } => {
                let i = self.member(member);
                lock(&self.servers).pause(i);
                Undo::Resume(i)
            }
            Fault::Kill { member } => {
                let i = self.member(member);
                lock(&self.servers).kill(i);
                Undo::Restart(i)
            }
            Fault::IsolateFollower { follower } => {
                let servers = lock(&self.servers);
                let Started::Zk(zk) = servers.typed() else {
                    return Undo::Nothing;
                };
                let leader = servers.leader();
                if follower == leader {
                    return Undo::Nothing;
                }
                for (from, to) in [(follower, leader), (leader, follower)] {
                    if let Some(link) = zk.quorum_link(from, to) {
                        link.blackhole();
                    }
                }
                Undo::Quorum(follower, leader)
            }
        }
    }
}

/// How the history names leases revoked by an etcd member that resumed.
pub const REVOKED_ON_RESUME: &str = "etcd server revoked live leases (etcd-io/etcd#15247)";

/// The count of leases an etcd member's expiry loop revoked, from its
/// metrics; `None` if it does not answer.
fn leases_expired(endpoint: &str) -> Option<u64> {
    let metrics = lock_testbed::etcd_metrics(endpoint).ok()?;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_server_lease_expired_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// How to heal one fault.
enum Undo {
    Nothing,
    /// Heal one client's proxy to one member.
    Link(usize, usize),
    /// Heal every proxy of one client.
    Client(usize),
    Resume(usize),
    Restart(usize),
    /// Heal the quorum links between a follower and a leader.
    Quorum(usize, usize),
}

impl Undo {
    fn heal(self, target: &Target) {
        match self {
            Undo::Nothing => {}
            Undo::Link(client, i) => target.clients[client].proxies[i].heal(),
            Undo::Client(client) => target.clients[client].heal(),
            Undo::Resume(i) => lock(&target.servers).resume(i),
            Undo::Restart(i) => lock(&target.servers).restart(i),
            Undo::Quorum(a, b) => {
                if let Started::Zk(zk) = lock(&target.servers).typed() {
                    for (from, to) in [(a, b), (b, a)] {
                        if let Some(link) = zk.quorum_link(from, to) {
                            link.heal();
                        }
                    }
                }
            }
        }
    }
}

/// Runs blocking server control (signals, restarts that wait until the
/// server answers) off the async workers' toes.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

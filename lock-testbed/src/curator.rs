//! [`CuratorLatch`]: a participant of Apache Curator's `LeaderLatch` (or
//! `LeaderSelector`) in a process of its own, as a Java service would run it: `java/CuratorLatch.java`
//! on Debian's Curator 5.4 jars (run by the JDK's source launcher), driven
//! line by line. Stopped by its PID when dropped.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::bins::{self, JAVA, JAVAC};
use crate::error::TestbedError;

/// How long a JVM may take to compile the harness and connect, on a busy
/// machine.
const START_UP: Duration = Duration::from_secs(90);

/// A Curator `LeaderLatch` participant with id `id` on the latch path
/// `path` of a ZooKeeper ensemble.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_testbed::{CuratorLatch, ZkEnsemble};
/// let zk = ZkEnsemble::start(1).unwrap();
/// let mut latch = CuratorLatch::start(&zk.connect_string(), "/jobs", "them", Duration::from_secs(4)).unwrap();
/// latch.wait_until_leader(Duration::from_secs(30)).unwrap();
/// assert_eq!(latch.leader(Duration::from_secs(10)).unwrap(), "them");
/// latch.close(Duration::from_secs(10)).unwrap();
/// ```
pub struct CuratorLatch {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every line it printed so far.
    seen: Vec<String>,
}

impl CuratorLatch {
    /// Starts the participant (a JVM), connects it, and starts its latch on
    /// `path` with `id` ([`CuratorLatch::connect`], then
    /// [`CuratorLatch::start_latch`]).
    pub fn start(
        connect: &str,
        path: &str,
        id: &str,
        session_timeout: Duration,
    ) -> Result<CuratorLatch, TestbedError> {
        let mut latch = Self::connect(connect, session_timeout)?;
        latch.start_latch(path, id, START_UP)?;
        Ok(latch)
    }

    /// Starts the participant's JVM and waits until its Curator client is
    /// connected to `connect` (a ZooKeeper connect string); no latch yet.
    pub fn connect(connect: &str, session_timeout: Duration) -> Result<CuratorLatch, TestbedError> {
        let java = bins::resolve(JAVA)?;
        bins::resolve(JAVAC)?;
        let classpath = bins::curator_classpath()?;
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/CuratorLatch.java");
        let mut child = Command::new(java)
            .arg("-cp")
            .arg(classpath)
            .arg(&source)
            .arg(connect)
            .arg(session_timeout.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| TestbedError::Spawn {
                what: "the Curator LeaderLatch participant (java)".into(),
                source,
            })?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => unreachable!("both were piped"),
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut latch = CuratorLatch {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        latch.wait_for("connected", START_UP, |l| l == "connected")?;
        Ok(latch)
    }

    /// Starts a `LeaderLatch` on `path` with participant id `id` (which has
    /// no whitespace at its start) and waits until it has started: its node
    /// is created, or being created.
    pub fn start_latch(
        &mut self,
        path: &str,
        id: &str,
        within: Duration,
    ) -> Result<(), TestbedError> {
        self.send(&format!("start {path} {id}"))?;
        self.wait_for("its latch started", within, |l| l == "started")
            .map(drop)
    }

    /// Starts a `LeaderSelector` (no requeue) on `path` with participant id
    /// `id` instead of a latch, and waits until it has started; it leads
    /// while it holds the path's `InterProcessMutex`, until
    /// [`CuratorLatch::resign`].
    pub fn start_selector(
        &mut self,
        path: &str,
        id: &str,
        within: Duration,
    ) -> Result<(), TestbedError> {
        self.send(&format!("select {path} {id}"))?;
        self.wait_for("its selector started", within, |l| l == "started")
            .map(drop)
    }

    /// A `LeaderSelector` leader gives up its leadership (returns from
    /// `takeLeadership`: its mutex node is deleted); waits until it says so.
    pub fn resign(&mut self, within: Duration) -> Result<(), TestbedError> {
        self.send("resign")?;
        self.wait_for("its resignation", within, |l| l == "not-leader")
            .map(drop)
    }

    /// Waits until the participant says it leads (at once if it last said
    /// so, while it was asked something else).
    pub fn wait_until_leader(&mut self, within: Duration) -> Result<(), TestbedError> {
        if self.says_leader() {
            return Ok(());
        }
        self.wait_for("leadership", within, |l| l == "leader")
            .map(drop)
    }

    /// Whether it has said it leads (and not since that it no longer does).
    pub fn says_leader(&mut self) -> bool {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen
            .iter()
            .rev()
            .find(|l| *l == "leader" || *l == "not-leader")
            .is_some_and(|l| l == "leader")
    }

    /// The id of the leader as the participant sees it (Curator's
    /// `getLeader()`: the data of the first latch node, or of the first
    /// mutex node for a selector).
    pub fn leader(&mut self, within: Duration) -> Result<String, TestbedError> {
        self.send("leader?")?;
        let line = self.wait_for("its leader", within, |l| l.starts_with("leader-is "))?;
        Ok(line["leader-is ".len()..].to_string())
    }

    /// Closes the latch or selector (its node is deleted; if it led, the
    /// next leads).
    pub fn close(&mut self, within: Duration) -> Result<(), TestbedError> {
        self.send("close")?;
        self.wait_for("the latch closed", within, |l| l == "closed")
            .map(drop)
    }

    fn send(&mut self, line: &str) -> Result<(), TestbedError> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|source| TestbedError::Io {
                context: format!("telling the Curator participant {line:?}"),
                source,
            })
    }

    /// Reads lines until one matches, within `within`.
    fn wait_for(
        &mut self,
        what: &str,
        within: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Result<String, TestbedError> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.not_ready(what, within, "no such line"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait().ok().flatten();
                    return Err(self.not_ready(what, within, &format!("it exited ({status:?})")));
                }
            }
        }
    }

    fn not_ready(&self, what: &str, waited: Duration, detail: &str) -> TestbedError {
        TestbedError::NotReady {
            what: format!("the Curator participant ({what})"),
            waited,
            detail: detail.to_string(),
            log_tail: self.seen.join("\n"),
        }
    }
}

impl Drop for CuratorLatch {
    fn drop(&mut self) {
        // Stopped by its own PID: no resignation, as a crashed service.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

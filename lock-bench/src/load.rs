//! Background CPU load for `--load N`: N busy processes (this program run
//! again with `--busy-loop`), started before ours and the raw protocol are
//! measured a second time and stopped by their PIDs afterwards, so that the
//! library's sensitivity to a busy machine is a number in the report.

use std::process::{Child, Command, Stdio};

/// The busy processes of one loaded pass; dropping it stops them.
pub struct BusyLoad {
    children: Vec<Child>,
}

impl BusyLoad {
    /// Starts `n` busy processes.
    pub fn start(n: usize) -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this program to start the load: {e}"))?;
        let mut load = Self {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let child = Command::new(&exe)
                .arg(BUSY_LOOP_FLAG)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a busy process: {e}"))?;
            // Pushed at once: an error starting the next one stops it too.
            load.children.push(child);
        }
        Ok(load)
    }
}

impl Drop for BusyLoad {
    fn drop(&mut self) {
        for child in &mut self.children {
            // SIGKILL to that PID, then reap it (it ends at once).
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The hidden flag that makes this program a busy process.
pub const BUSY_LOOP_FLAG: &str = "--busy-loop";

/// The work of one busy process: spins on one core until it is killed, or
/// until its parent is gone (a benchmark that crashed leaves no load behind).
pub fn busy_loop() {
    let parent = std::os::unix::process::parent_id();
    let mut x = 0u64;
    loop {
        for _ in 0..10_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    /// The flag is the one clap's `--busy-loop` option answers to.
    #[test]
    fn the_flag_is_the_hidden_option() {
        let args = crate::parse_args(["lock-bench".into(), super::BUSY_LOOP_FLAG.into()]).unwrap();
        assert!(args.busy_loop);
    }
}

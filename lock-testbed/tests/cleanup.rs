//! Servers die with the test process: at normal exit, after a failed test (atexit),
//! and when the process is SIGKILLed (PDEATHSIG).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testbed::{pid_alive, shared_etcd, shared_redis, shared_redis_set, shared_zk, RespValue};

const PROBE_ENV: &str = "LOCK_TESTBED_PROBE";

/// Every shared server, started from this short-lived test thread, answers. Run again
/// as a child process by the test below (with LOCK_TESTBED_PROBE set) it also prints
/// its server PIDs and then exits, fails, or waits to be SIGKILLed.
#[test]
fn probe_shared_servers() {
    let redis = shared_redis().unwrap();
    let set = shared_redis_set().unwrap();
    let etcd = shared_etcd().unwrap();
    let zk = shared_zk().unwrap();
    assert_eq!(
        redis.cmd(&["PING"]).unwrap(),
        RespValue::Simple("PONG".into())
    );
    for node in set.nodes() {
        assert_eq!(
            node.cmd(&["PING"]).unwrap(),
            RespValue::Simple("PONG".into())
        );
    }
    assert_eq!(etcd.leader().unwrap(), 0);
    assert!(zk.srvr(0).unwrap().contains("Mode: standalone"));

    if let Ok(mode) = std::env::var(PROBE_ENV) {
        let mut pids: Vec<u32> = vec![redis.pid().unwrap()];
        pids.extend(set.nodes().iter().map(|n| n.pid().unwrap()));
        pids.push(etcd.pid(0).unwrap());
        pids.push(zk.pid(0).unwrap());
        let mut dirs = vec![redis.dir().unwrap(), etcd.dir().unwrap(), zk.dir().unwrap()];
        dirs.extend(set.nodes().iter().map(|n| n.dir().unwrap()));
        println!(
            "PROBE-PIDS {}",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!(
            "PROBE-DIRS {}",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        match mode.as_str() {
            "panic" => panic!("probe fails on purpose"),
            "hang" => std::thread::sleep(Duration::from_secs(120)),
            _ => {}
        }
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_probe(mode: &str) -> (Vec<u32>, Vec<String>) {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "probe_shared_servers",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let mut pids = Vec::new();
    let mut dirs = Vec::new();
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("PROBE-PIDS ") {
            pids = rest.split(' ').map(|p| p.parse().unwrap()).collect();
        }
        if let Some((_, rest)) = line.split_once("PROBE-DIRS ") {
            dirs = rest.split(' ').map(str::to_string).collect();
            break;
        }
    }
    assert_eq!(pids.len(), 8, "probe ({mode}) printed no PIDs");
    if mode == "hang" {
        // The probe is still running: its servers must be alive.
        assert!(pids.iter().all(|&p| pid_alive(p)));
        child.0.kill().unwrap();
    }
    // Drain the rest: closing the pipe early would make the probe fail on EPIPE.
    for line in lines {
        let _ = line;
    }
    let status = child.0.wait().unwrap();
    match mode {
        "exit" => assert!(status.success(), "probe exited with {status}"),
        "panic" => assert_eq!(status.code(), Some(101), "probe exited with {status}"),
        _ => assert_eq!(status.code(), None, "probe was not killed: {status}"),
    }
    (pids, dirs)
}

/// After a normal exit or a failed test, atexit has already killed and reaped every
/// server (and removed the temp dirs) when the process is gone; after SIGKILL of the
/// test process, PDEATHSIG kills them within moments.
#[test]
fn servers_die_with_the_test_process() {
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = ["exit", "panic", "hang"]
            .into_iter()
            .map(|mode| (mode, s.spawn(move || run_probe(mode))))
            .collect();
        handles
            .into_iter()
            .map(|(mode, h)| (mode, h.join().expect("probe thread")))
            .collect::<Vec<_>>()
    });
    for (mode, (pids, dirs)) in results {
        if mode == "hang" {
            let deadline = Instant::now() + Duration::from_secs(5);
            while pids.iter().any(|&p| pid_alive(p)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        assert!(
            alive.is_empty(),
            "{mode}: server PIDs still alive: {alive:?}"
        );
        if mode != "hang" {
            for dir in dirs {
                assert!(
                    !std::path::Path::new(&dir).exists(),
                    "{mode}: {dir} left behind"
                );
            }
        } else {
            // SIGKILL leaves the temp dirs (no exit handler can run); the next process
            // that creates a server dir sweeps dirs of dead PIDs.
            let _fresh = lock_testbed::RedisServer::start().unwrap();
            for dir in dirs {
                assert!(
                    !std::path::Path::new(&dir).exists(),
                    "stale {dir} not swept"
                );
            }
        }
    }
}

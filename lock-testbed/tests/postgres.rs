//! PostgreSQL: started as a non-root user, answers SQL, survives a crash and
//! restart with its data, and leaves no process or dir behind.

use std::path::PathBuf;
use std::process::Command;

use lock_testbed::{pid_alive, PostgresServer};

/// `psql` from the same install as the server (Debian's `postgresql` pulls in its client).
fn psql(server: &PostgresServer, sql: &str) -> String {
    let bin = std::env::var("DISTLOCK_POSTGRES_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
                .unwrap()
                .flatten()
                .map(|e| e.path().join("bin"))
                .filter(|b| b.join("psql").exists())
                .collect();
            dirs.sort();
            dirs.pop()
                .expect("a PostgreSQL client under /usr/lib/postgresql")
        });
    let out = Command::new(bin.join("psql"))
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &server.url(),
            "-c",
            sql,
        ])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The effective uid of a live process, from /proc.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn postgres_runs_unprivileged_keeps_data_across_a_crash_and_cleans_up() {
    let mut server = PostgresServer::start().unwrap();
    let pid = server.pid().unwrap();
    assert!(server.url().starts_with("postgres://distlock@127.0.0.1:"));
    assert_ne!(uid_of(pid), 0, "PostgreSQL must not run as root");

    assert_eq!(psql(&server, "SELECT 1 + 1"), "2");
    psql(&server, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)");

    // A crash: the postmaster and every worker are gone, the data stays.
    let workers = server.worker_pids();
    assert!(!workers.is_empty(), "a running server has worker processes");
    server.kill();
    assert_eq!(server.pid(), None);
    assert!(!pid_alive(pid));
    assert!(
        workers.iter().all(|&w| !pid_alive(w)),
        "workers outlived the postmaster"
    );
    server.restart().unwrap();
    assert_eq!(psql(&server, "SELECT v FROM t"), "7");

    let (pid, workers, dir) = (
        server.pid().unwrap(),
        server.worker_pids(),
        server.dir().to_path_buf(),
    );
    drop(server);
    assert!(!pid_alive(pid), "postmaster {pid} alive after drop");
    assert!(
        workers.iter().all(|&w| !pid_alive(w)),
        "workers alive after drop"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
}

const PROBE_ENV: &str = "LOCK_TESTBED_PG_PROBE";

/// Starts a server and checks it answers; run again as a child process by the
/// test below (with LOCK_TESTBED_PG_PROBE set), it prints the server's PIDs and
/// waits to be SIGKILLed.
#[test]
fn probe_postgres() {
    let server = PostgresServer::start().unwrap();
    assert_eq!(psql(&server, "SELECT 'up'"), "up");
    if std::env::var(PROBE_ENV).is_ok() {
        let mut pids = vec![server.pid().unwrap()];
        pids.extend(server.worker_pids());
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        println!("PG-PIDS {}", pids.join(" "));
        std::thread::sleep(std::time::Duration::from_secs(120));
    }
}

/// The parent-death signal survives the switch to the unprivileged user: a
/// test process killed with SIGKILL takes its PostgreSQL down with it.
#[test]
fn postgres_dies_with_a_killed_test_process() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "probe_postgres",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, "hang")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let line = out
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("PG-PIDS "))
        .expect("the probe prints its PIDs");
    // libtest prints "test probe_postgres ... " before the probe's own output.
    let (_, list) = line.split_once("PG-PIDS ").unwrap();
    let pids: Vec<u32> = list.split(' ').map(|p| p.parse().unwrap()).collect();
    // The postmaster is up; a worker may come and go on its own (a
    // short-lived startup or checkpoint process), so only the postmaster
    // must be alive here.
    assert!(pid_alive(pids[0]), "postmaster {} not running", pids[0]);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| pid_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = pids.into_iter().filter(|&p| pid_alive(p)).collect();
    assert!(
        alive.is_empty(),
        "still alive after the test process died: {alive:?}"
    );
}

//! One member process of a cluster (etcd member, ZooKeeper server): the fault state
//! shared by [`crate::EtcdCluster`] and [`crate::ZkEnsemble`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::process::ManagedChild;
use crate::TestbedError;

pub(crate) struct Member {
    /// `None` while killed.
    pub(crate) child: Option<ManagedChild>,
    /// Set by pause, cleared by resume/kill/restart: leader queries skip paused members.
    pub(crate) paused: AtomicBool,
    /// The member's own dir (config, data, logs).
    pub(crate) dir: PathBuf,
    /// Its log files, for error messages.
    pub(crate) logs: Vec<PathBuf>,
    /// For messages: "etcd member e2 on 127.0.0.1:P".
    pub(crate) what: String,
}

impl Member {
    pub(crate) fn new(dir: PathBuf, logs: Vec<PathBuf>, what: String) -> Member {
        Member {
            child: None,
            paused: AtomicBool::new(false),
            dir,
            logs,
            what,
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// Running and not paused: worth asking.
    pub(crate) fn answering(&self) -> bool {
        self.child.is_some() && !self.paused.load(Ordering::SeqCst)
    }

    fn running(&self, operation: &'static str) -> Result<&ManagedChild, TestbedError> {
        self.child.as_ref().ok_or_else(|| TestbedError::NotRunning {
            what: self.what.clone(),
            operation,
        })
    }

    pub(crate) fn pause(&self) -> Result<(), TestbedError> {
        self.running("pause")?.signal(libc::SIGSTOP, &self.what)?;
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn resume(&self) -> Result<(), TestbedError> {
        self.running("resume")?.signal(libc::SIGCONT, &self.what)?;
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    pub(crate) fn log_tail(&self) -> String {
        crate::process::log_tails(&self.logs, 25)
    }

    pub(crate) fn port_was_taken(&self) -> bool {
        self.logs
            .iter()
            .any(|l| crate::process::log_says_addr_in_use(l))
    }
}

/// Look up member `i` or return [`TestbedError::NoSuchMember`].
pub(crate) fn member_index<T>(items: &[T], i: usize) -> Result<&T, TestbedError> {
    items.get(i).ok_or(TestbedError::NoSuchMember {
        index: i,
        members: items.len(),
    })
}

/// Mutable variant of [`member_index`].
pub(crate) fn member_index_mut<T>(items: &mut [T], i: usize) -> Result<&mut T, TestbedError> {
    let members = items.len();
    items
        .get_mut(i)
        .ok_or(TestbedError::NoSuchMember { index: i, members })
}

/// Checks that a single server is asked about its only member.
pub(crate) fn only_member(i: usize) -> Result<(), TestbedError> {
    if i == 0 {
        Ok(())
    } else {
        Err(TestbedError::NoSuchMember {
            index: i,
            members: 1,
        })
    }
}

//! `memory://`: [`lock_core::MemoryLock`], in-process, always built in.

use std::sync::Arc;

use lock_core::{LockService, MemoryLock};

use super::{Credentials, Descriptor, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `memory://` (or `mem://`, or `memory:`): no server, no path, no options.
pub(crate) const MEMORY: Descriptor = Descriptor {
    scheme: Scheme::Memory,
    names: &["memory", "mem"],
    tls_names: &[],
    feature: None,
    enabled: true,
    default_port: None,
    servers: Servers::None,
    credentials: Credentials::None,
    options: &[],
    check: |_| Ok(()),
    connect,
};

fn connect(_: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async { Ok(Arc::new(MemoryLock::new()) as Arc<dyn LockService>) })
}

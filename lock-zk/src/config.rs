//! Configuration of a [`crate::ZkLock`] client.

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, TlsConfig};

/// The default connect string: `127.0.0.1:2181`.
pub const DEFAULT_CONNECT: &str = "127.0.0.1:2181";
/// The default session timeout asked of the server: 10 s (kazoo's default).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The default parent of every lock znode: `/distlock`.
pub const DEFAULT_BASE_PATH: &str = "/distlock";
/// The default connect timeout: 2 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The default request timeout: 2 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The shortest session, connect or request timeout accepted: 1 ms.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest session, connect or request timeout accepted: one day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest [`ZkConfig::identifier`] accepted, in bytes: 4 KiB.
pub const MAX_IDENTIFIER_LEN: usize = 4096;

/// A ZooKeeper permission bit set, for [`AclEntry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Perms(u8);

impl Perms {
    /// Read the node's data and list its children.
    pub const READ: Perms = Perms(1);
    /// Set the node's data.
    pub const WRITE: Perms = Perms(2);
    /// Create children.
    pub const CREATE: Perms = Perms(4);
    /// Delete children.
    pub const DELETE: Perms = Perms(8);
    /// Change the ACL.
    pub const ADMIN: Perms = Perms(16);
    /// Everything.
    pub const ALL: Perms = Perms(31);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

/// One ACL entry: `scheme:id` gets `perms` (e.g. `digest`, `user:base64(sha1)`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AclEntry {
    /// The authentication scheme: `world`, `auth`, `digest`, `ip`, `sasl`, ...
    pub scheme: String,
    /// The identity within the scheme (`anyone` for `world`).
    pub id: String,
    /// What it may do.
    pub perms: Perms,
}

impl AclEntry {
    /// `scheme:id` with `perms`.
    pub fn new(scheme: impl Into<String>, id: impl Into<String>, perms: Perms) -> Self {
        Self {
            scheme: scheme.into(),
            id: id.into(),
            perms,
        }
    }
}

/// The ACL put on every node this crate creates (contender nodes and missing
/// parents).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeAcl {
    /// `world:anyone` may do everything (ZooKeeper's `OPEN_ACL_UNSAFE`). The default.
    #[default]
    Open,
    /// Only sessions authenticated as the creator may do anything
    /// (`CREATOR_ALL_ACL`); needs [`ZkConfig::auth`]. Every service sharing
    /// the locks must authenticate as the same identity.
    CreatorAll,
    /// These entries (must not be empty).
    Custom(Vec<AclEntry>),
}

/// How to reach ZooKeeper, where the locks live, and how long to wait.
///
/// ```
/// use std::time::Duration;
/// use lock_zk::ZkConfig;
/// let config = ZkConfig::new("zk1:2181,zk2:2181,zk3:2181/apps/billing")
///     .session_timeout(Duration::from_secs(6))
///     .base_path("/locks")
///     .auth("digest", b"billing:secret");
/// assert_eq!(config.request_timeout, Duration::from_secs(2));
/// // Credentials never show up in logs.
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZkConfig {
    /// The servers, `host:port[,host:port...][/chroot]`, as for the Java
    /// client. With a chroot every path below is relative to it; missing
    /// chroot nodes are created (as container nodes). Default:
    /// [`DEFAULT_CONNECT`].
    pub connect: String,
    /// The session timeout asked of the server. The server clamps it to
    /// `2..=20` times its `tickTime` (4 s ..= 40 s with the default
    /// `tickTime=2000`); the negotiated value is what counts (see
    /// [`crate::ZkLock::session_timeout`]). It is how long a crashed or
    /// partitioned holder keeps its lock, and it bounds every guard's
    /// validity. Default: [`DEFAULT_SESSION_TIMEOUT`] (10 s).
    pub session_timeout: Duration,
    /// The parent of every lock: lock name `N` is the znode `<base_path>/N`
    /// (a name with `/` segments becomes nested znodes). An absolute path,
    /// no trailing `/`; `/` itself puts locks at the (chroot) root.
    /// Default: [`DEFAULT_BASE_PATH`] (`/distlock`).
    pub base_path: String,
    /// The ACL of the nodes created. Default: [`NodeAcl::Open`].
    pub acl: NodeAcl,
    /// Credentials sent on every connection, as `(scheme, auth)` pairs
    /// (`("digest", b"user:password")`). Default: none.
    pub auth: Vec<(String, Vec<u8>)>,
    /// How long establishing a session may take in total (every server
    /// tried), at [`crate::ZkLock::connect`] and when a new session replaces
    /// an expired one (then also within the bound of the call that needs
    /// it). A connect that every server refuses fails at once. Default:
    /// [`DEFAULT_CONNECT_TIMEOUT`] (2 s).
    pub connect_timeout: Duration,
    /// The most a call waits for the server beyond its own wait: `acquire`
    /// returns within its wait plus this, every other call (`try_acquire`,
    /// `release`, `inspect`, `list`, a downgrade) within this, however many
    /// requests it sends and including the wait for a connection being
    /// re-established. Default: [`DEFAULT_REQUEST_TIMEOUT`] (2 s).
    pub request_timeout: Duration,
    /// Who this client is, for operators looking at the tree: each
    /// contender node's data is the holder's description as one JSON
    /// object (host, process id and note, see [`lock_core::Holder`]) with
    /// this identifier as its `id` field, e.g.
    /// `{"host":"web-1","id":"lock-zk pid 4242","note":"nightly","pid":4242}`
    /// (Curator stores the client's IP address there, kazoo its
    /// `identifier`; kazoo's `Lock.contenders()` returns this JSON text for
    /// our nodes). Default: `lock-zk pid <process id>`.
    pub identifier: String,
    /// TLS to every server (ZooKeeper's `secureClientPort`): the CA to
    /// trust (default: the system's roots) and a client certificate and
    /// key for servers with `ssl.clientAuth=need`. Needs the
    /// `rustls-aws-lc` feature (on by default). Default: none (plain TCP).
    pub tls: Option<TlsConfig>,
    /// Which Curator recipe's nodes the elections speak (campaign, leader,
    /// observe). Default: [`ElectionRecipe::LeaderLatch`].
    pub election: ElectionRecipe,
}

/// The Curator recipe whose nodes an election uses, so that Java services
/// running that recipe on the same path and ours stand in one line and see
/// each other's leader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElectionRecipe {
    /// `LeaderLatch`: candidates are `_c_<uuid>-latch-<seq>` children
    /// holding their value (Curator's participant id).
    #[default]
    LeaderLatch,
    /// `LeaderSelector`: the leader is the holder of the path's
    /// `InterProcessMutex`, candidates are `_c_<uuid>-lock-<seq>` children
    /// holding their value (its participant id). As in Curator, an
    /// election and a mutex of one name then share one line.
    LeaderSelector,
}

impl Default for ZkConfig {
    fn default() -> Self {
        Self {
            connect: DEFAULT_CONNECT.to_string(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            base_path: DEFAULT_BASE_PATH.to_string(),
            acl: NodeAcl::Open,
            auth: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            identifier: format!("lock-zk pid {}", std::process::id()),
            tls: None,
            election: ElectionRecipe::default(),
        }
    }
}

impl ZkConfig {
    /// The defaults, with the servers in `connect` (`host:port[,...][/chroot]`).
    pub fn new(connect: impl Into<String>) -> Self {
        Self {
            connect: connect.into(),
            ..Self::default()
        }
    }

    /// Sets [`ZkConfig::session_timeout`].
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets [`ZkConfig::base_path`].
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        self.base_path = path.into();
        self
    }

    /// Sets [`ZkConfig::acl`].
    pub fn acl(mut self, acl: NodeAcl) -> Self {
        self.acl = acl;
        self
    }

    /// Adds credentials to [`ZkConfig::auth`].
    pub fn auth(mut self, scheme: impl Into<String>, auth: impl AsRef<[u8]>) -> Self {
        self.auth.push((scheme.into(), auth.as_ref().to_vec()));
        self
    }

    /// Sets [`ZkConfig::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`ZkConfig::request_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`ZkConfig::tls`]: TLS on, with these files.
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets [`ZkConfig::election`].
    pub fn election(mut self, recipe: ElectionRecipe) -> Self {
        self.election = recipe;
        self
    }

    /// Sets [`ZkConfig::identifier`].
    pub fn identifier(mut self, identifier: impl Into<String>) -> Self {
        self.identifier = identifier.into();
        self
    }

    /// Checks every field, as [`crate::ZkLock::connect`] does first: an
    /// [`lock_core::LockErrorKind::InvalidArgument`] error that says what is
    /// wrong, never a panic. Timeouts must lie within [`MIN_TIMEOUT`] ..=
    /// [`MAX_TIMEOUT`], the connect string and paths follow ZooKeeper's
    /// rules, a custom ACL has entries, [`NodeAcl::CreatorAll`] comes with
    /// credentials, and the identifier is at most [`MAX_IDENTIFIER_LEN`] bytes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_zk::ZkConfig;
    /// assert!(ZkConfig::new("zk1:2181").validate().is_ok());
    /// let err = ZkConfig::new("zk1:2181")
    ///     .request_timeout(Duration::from_secs(400 * 86_400))
    ///     .validate()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("request_timeout"));
    /// ```
    pub fn validate(&self) -> Result<(), LockError> {
        self.resolve().map(|_| ())
    }

    /// Checks the configuration and splits the connect string into the
    /// server list and the chroot-prefixed base path.
    pub(crate) fn resolve(&self) -> Result<Resolved, LockError> {
        let timeout = |what: &str, d: Duration| {
            if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&d) {
                Ok(())
            } else {
                Err(LockError::invalid(format!(
                    "{what} {d:?} is out of range: it must be at least {MIN_TIMEOUT:?} and at most {MAX_TIMEOUT:?} (one day)"
                )))
            }
        };
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        timeout("session_timeout", self.session_timeout)?;
        timeout("connect_timeout", self.connect_timeout)?;
        timeout("request_timeout", self.request_timeout)?;
        if self.identifier.len() > MAX_IDENTIFIER_LEN {
            return Err(LockError::invalid(format!(
                "identifier is {} bytes long; at most {MAX_IDENTIFIER_LEN} are stored in each node",
                self.identifier.len()
            )));
        }
        if let Some((scheme, _)) = self.auth.iter().find(|(scheme, _)| scheme.is_empty()) {
            return Err(LockError::invalid(format!(
                "credentials need a scheme (e.g. \"digest\"), not {scheme:?}"
            )));
        }
        match &self.acl {
            NodeAcl::Custom(entries) if entries.is_empty() => {
                return Err(LockError::invalid("a custom ACL needs at least one entry"));
            }
            NodeAcl::CreatorAll if self.auth.is_empty() => {
                return Err(LockError::invalid(
                    "NodeAcl::CreatorAll needs credentials (ZkConfig::auth): ZooKeeper refuses it for unauthenticated sessions",
                ));
            }
            _ => {}
        }
        let (hosts, chroot) = split_chroot(&self.connect)?;
        if self.base_path != "/" {
            check_path("base_path", &self.base_path)?;
        }
        let base = if self.base_path == "/" {
            ""
        } else {
            self.base_path.as_str()
        };
        Ok(Resolved {
            hosts,
            root: format!("{}{base}", chroot.unwrap_or_default()),
        })
    }
}

/// What [`ZkConfig::resolve`] derives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The connect string without its chroot.
    pub hosts: String,
    /// The absolute parent path of every lock (`chroot + base_path`); empty
    /// for the server root.
    pub root: String,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let schemes: Vec<&str> = self
            .auth
            .iter()
            .map(|(scheme, _)| scheme.as_str())
            .collect();
        f.debug_struct("ZkConfig")
            .field("connect", &self.connect)
            .field("session_timeout", &self.session_timeout)
            .field("base_path", &self.base_path)
            .field("acl", &self.acl)
            .field("auth_schemes", &schemes)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("identifier", &self.identifier)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Splits `host:port,...[/chroot]` into the server list and the chroot (the
/// Java client's syntax: the chroot follows the last server).
fn split_chroot(connect: &str) -> Result<(String, Option<String>), LockError> {
    let connect = connect.trim();
    if connect.is_empty() {
        return Err(LockError::invalid("the ZooKeeper connect string is empty"));
    }
    let last_start = connect.rfind(',').map_or(0, |i| i + 1);
    let last = &connect[last_start..];
    let scheme_len = ["tcp://", "tcp+tls://"]
        .iter()
        .find(|s| last.starts_with(**s))
        .map_or(0, |s| s.len());
    let Some(slash) = last[scheme_len..].find('/') else {
        return Ok((connect.to_string(), None));
    };
    let at = last_start + scheme_len + slash;
    let (hosts, chroot) = connect.split_at(at);
    if hosts.is_empty() || hosts.ends_with(',') {
        return Err(LockError::invalid(format!(
            "connect string {connect:?} has no server before its chroot"
        )));
    }
    if chroot == "/" {
        return Ok((hosts.to_string(), None));
    }
    check_path("chroot", chroot)?;
    Ok((hosts.to_string(), Some(chroot.to_string())))
}

/// ZooKeeper's path rules: absolute, no empty, `.` or `..` segment, no
/// trailing `/`, none of the characters ZooKeeper refuses.
pub(crate) fn check_path(what: &str, path: &str) -> Result<(), LockError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(LockError::invalid(format!(
            "{what} {path:?} must start with '/'"
        )));
    };
    if rest
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(LockError::invalid(format!(
            "{what} {path:?} has an empty, '.' or '..' segment, or ends with '/'"
        )));
    }
    if let Some(c) = path.chars().find(|c| !allowed_char(*c)) {
        return Err(LockError::invalid(format!(
            "{what} {path:?} contains {c:?}, which ZooKeeper does not allow in paths"
        )));
    }
    Ok(())
}

/// Characters ZooKeeper accepts in a path (`PathUtils.validatePath`, which
/// works on UTF-16 units: it refuses surrogates, so every character above
/// U+FFFF, as well as the private use area).
pub(crate) fn allowed_char(c: char) -> bool {
    !matches!(
        c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{10ffff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_chroot_from_servers() {
        let r = ZkConfig::new("a:1,b:2/apps/x").resolve().unwrap();
        assert_eq!(r.hosts, "a:1,b:2");
        assert_eq!(r.root, "/apps/x/distlock");
        let r = ZkConfig::new("tcp://a:1/c")
            .base_path("/")
            .resolve()
            .unwrap();
        assert_eq!((r.hosts.as_str(), r.root.as_str()), ("tcp://a:1", "/c"));
        let r = ZkConfig::new("127.0.0.1:2181")
            .base_path("/")
            .resolve()
            .unwrap();
        assert_eq!((r.hosts.as_str(), r.root.as_str()), ("127.0.0.1:2181", ""));
        let r = ZkConfig::new("[::1]:2181/").resolve().unwrap();
        assert_eq!(
            (r.hosts.as_str(), r.root.as_str()),
            ("[::1]:2181", "/distlock")
        );
    }

    #[test]
    fn rejects_bad_configs() {
        for bad in [
            ZkConfig::new(""),
            ZkConfig::new("/chroot"),
            ZkConfig::new("a:1/x/"),
            ZkConfig::new("a:1").base_path("locks"),
            ZkConfig::new("a:1").base_path("/a//b"),
            ZkConfig::new("a:1").base_path("/a/\u{1}"),
            ZkConfig::new("a:1").base_path("/emoji-\u{1f512}"),
            ZkConfig::new("a:1").session_timeout(Duration::ZERO),
            ZkConfig::new("a:1").request_timeout(Duration::ZERO),
            ZkConfig::new("a:1").connect_timeout(Duration::from_micros(999)),
            ZkConfig::new("a:1").session_timeout(Duration::MAX),
            ZkConfig::new("a:1").identifier("x".repeat(MAX_IDENTIFIER_LEN + 1)),
            ZkConfig::new("a:1").auth("", b"user:pw"),
            ZkConfig::new("a:1").acl(NodeAcl::Custom(Vec::new())),
            ZkConfig::new("a:1").acl(NodeAcl::CreatorAll),
        ] {
            let err = bad.resolve().expect_err(&format!("{bad:?}"));
            assert_eq!(
                err.kind(),
                lock_core::LockErrorKind::InvalidArgument,
                "{bad:?}"
            );
        }
    }
}

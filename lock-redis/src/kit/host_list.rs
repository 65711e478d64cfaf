//! URLs that name several Redis servers in their host part
//! (`redis+sentinel://s1:26379,s2,s3/MASTER`, `redis+cluster://n1,n2,n3`):
//! the scheme, the credentials, the `host:port` list and the path, split
//! the same way for both.
//!
//! Parsed here rather than with the `url` crate: a comma-separated list of
//! hosts is no URL host.

use lock_core::LockError;

use crate::kit::connect::redact_url;

/// What a URL of one multi-host kind looks like, for parsing and errors.
pub(crate) struct HostListKind {
    /// The scheme without TLS (`redis+cluster`).
    pub(crate) plain: &'static str,
    /// The scheme with TLS (`rediss+cluster`).
    pub(crate) tls: &'static str,
    /// What the URL names, in errors (`Redis Cluster`).
    pub(crate) what: &'static str,
    /// One host of the list, in errors (`node`).
    pub(crate) host: &'static str,
    /// The path the kind expects, in errors (`[/0]`).
    pub(crate) path: &'static str,
    /// The port of a host given without one.
    pub(crate) default_port: u16,
}

/// A multi-host URL, split.
pub(crate) struct HostList<'a> {
    /// `rediss+...`: TLS to every server.
    pub(crate) tls: bool,
    /// `user:password@` as written (percent-encoded), or empty. Never shown.
    pub(crate) userinfo: &'a str,
    /// The hosts, `host:port` (the default port filled in), in order.
    pub(crate) hosts: Vec<String>,
    /// The path, from its `/` (empty if none).
    pub(crate) path: &'a str,
    kind: &'a HostListKind,
    scheme: String,
    shown: String,
}

impl HostListKind {
    /// `url` split, `None` if its scheme is not this kind's. A URL of this
    /// kind with a bad host, or with options (`?`, `#`: those go to the
    /// facade's URL), is an `InvalidArgument` error that never shows the
    /// password.
    pub(crate) fn split<'a>(&'a self, url: &'a str) -> Result<Option<HostList<'a>>, LockError> {
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(None);
        };
        let scheme = scheme.to_ascii_lowercase();
        let tls = if scheme == self.plain {
            false
        } else if scheme == self.tls {
            true
        } else {
            return Ok(None);
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let mut list = HostList {
            tls,
            userinfo,
            hosts: Vec::new(),
            path,
            kind: self,
            scheme,
            shown: redact_url(url),
        };
        if path.contains(['?', '#']) {
            return Err(list.invalid("options go to the URL of the distlock facade, not here"));
        }
        for h in hosts.split(',') {
            match host_port(h, self.default_port) {
                Some(addr) => list.hosts.push(addr),
                None => return Err(list.invalid(&format!("bad {} {h:?}", self.host))),
            }
        }
        Ok(Some(list))
    }
}

impl HostList<'_> {
    /// The `InvalidArgument` error of this URL: `why`, and the form the
    /// kind expects; the password is never shown.
    pub(crate) fn invalid(&self, why: &str) -> LockError {
        LockError::invalid(format!(
            "invalid {} URL {:?}: {why} (expected \
             {}://[user:password@]host[:port][,host[:port]...]{})",
            self.kind.what, self.shown, self.scheme, self.kind.path
        ))
    }
}

/// `host[:port]` (an IPv6 host in brackets) with `default_port` filled in.
fn host_port(text: &str, default_port: u16) -> Option<String> {
    let text = text.trim();
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{host}]"), port)
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (text.to_string(), None),
        }
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port,
    };
    Some(format!("{host}:{port}"))
}

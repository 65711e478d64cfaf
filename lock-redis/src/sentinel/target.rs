//! What a `redis+sentinel://` URL names: the sentinels, the monitored
//! primary's name, the database, and the credentials of the data nodes.
//!
//! The URL is parsed here rather than with the `url` crate: its host part
//! is a list (`s1:26379,s2,s3`), which is no URL host, and its path holds
//! two fields (`/MASTER_NAME[/db]`).

use std::fmt;

use lock_core::LockError;

use crate::kit::host_list::HostListKind;

/// The sentinels' port when the URL gives none.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// What a `redis+sentinel://` URL looks like.
const SENTINEL_URL: HostListKind = HostListKind {
    plain: "redis+sentinel",
    tls: "rediss+sentinel",
    what: "Redis Sentinel",
    host: "sentinel",
    path: "/MASTER_NAME[/db]",
    default_port: DEFAULT_SENTINEL_PORT,
};

/// `redis+sentinel://` (and `rediss+sentinel://`), parsed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SentinelTarget {
    /// The sentinels, `host:port`, in the URL's order.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub(crate) master: String,
    /// The database on the data nodes.
    pub(crate) db: u32,
    /// `user:password@` of the data nodes as written (percent-encoded), or
    /// empty. Never shown.
    userinfo: String,
    /// TLS to the sentinels and to the data nodes (`rediss+sentinel://`).
    pub(crate) tls: bool,
}

impl fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl SentinelTarget {
    /// The target of `url`, `None` if it is no Sentinel URL. A Sentinel
    /// URL that is malformed is an `InvalidArgument` error that never
    /// shows the password.
    pub(crate) fn parse(url: &str) -> Result<Option<Self>, LockError> {
        let Some(url) = SENTINEL_URL.split(url)? else {
            return Ok(None);
        };
        let invalid = |why: &str| url.invalid(why);
        let path = url.path;
        let mut fields = path.trim_start_matches('/').split('/');
        let master = fields.next().unwrap_or_default();
        if master.is_empty() {
            return Err(invalid("no master name"));
        }
        let db = match fields.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse()
                .map_err(|_| invalid(&format!("the database {db:?} is not a number")))?,
        };
        if fields.any(|f| !f.is_empty()) {
            return Err(invalid("the path has more than /MASTER_NAME/db"));
        }
        Ok(Some(Self {
            sentinels: url.hosts.clone(),
            master: master.to_string(),
            db,
            userinfo: url.userinfo.to_string(),
            tls: url.tls,
        }))
    }

    /// The URL of the data node at `addr` (`host:port`), with the
    /// credentials and the database.
    pub(crate) fn node_url(&self, addr: &str) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://{}{addr}/{}", self.userinfo, self.db)
    }

    /// The URL of sentinel `addr` (no credentials: the sentinels of a
    /// deployment are reached without them, as redis-py and Redisson do
    /// by default).
    pub(crate) fn sentinel_url(&self, addr: &str) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://{addr}/")
    }
}

/// `host:port` of an address a sentinel reported (`host`, `port`), with
/// an IPv6 host in brackets.
pub(crate) fn join_addr(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_parse() {
        let t = SentinelTarget::parse("redis+sentinel://:pw@10.0.0.1:26380,10.0.0.2,[::1]/main/3")
            .unwrap()
            .unwrap();
        assert_eq!(
            t.sentinels,
            ["10.0.0.1:26380", "10.0.0.2:26379", "[::1]:26379"]
        );
        assert_eq!(t.master, "main");
        assert_eq!(t.db, 3);
        assert!(!t.tls);
        assert_eq!(t.node_url("10.0.0.9:6379"), "redis://:pw@10.0.0.9:6379/3");
        assert_eq!(t.sentinel_url("10.0.0.2:26379"), "redis://10.0.0.2:26379/");
        assert!(!format!("{t:?}").contains("pw"));
        let t = SentinelTarget::parse("REDISS+SENTINEL://s1/m")
            .unwrap()
            .unwrap();
        assert!(t.tls);
        assert_eq!(t.db, 0);
        assert_eq!(t.node_url("h:1"), "rediss://h:1/0");
        assert_eq!(SentinelTarget::parse("redis://h:1/0").unwrap(), None);
    }

    #[test]
    fn bad_sentinel_urls_are_invalid_and_hide_the_password() {
        for bad in [
            "redis+sentinel://:secret@s1,s2/",
            "redis+sentinel://:secret@s1:0/m",
            "redis+sentinel://:secret@s1:x/m",
            "redis+sentinel://:secret@s1,,s2/m",
            "redis+sentinel://:secret@s1/m/x",
            "redis+sentinel://:secret@s1/m/1/2",
            "redis+sentinel://:secret@s1/m?x=1",
            "redis+sentinel://:secret@[::1/m",
        ] {
            let err = SentinelTarget::parse(bad).unwrap_err();
            assert_eq!(
                err.kind(),
                lock_core::LockErrorKind::InvalidArgument,
                "{bad}"
            );
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn reported_addresses_join() {
        assert_eq!(join_addr("10.0.0.1", "6379"), "10.0.0.1:6379");
        assert_eq!(join_addr("::1", "6379"), "[::1]:6379");
    }
}

//! The parser of lock service URLs: the grammar shared by every backend
//! (scheme, credentials, hosts, path, query), checked against the
//! description of the backend the scheme names.

use std::collections::BTreeMap;
use std::str::FromStr;

use lock_core::LockError;

use crate::backends::{self, Credentials, Descriptor, OptionKind, Servers};
use crate::duration::parse_duration;
use crate::scheme::Scheme;
use crate::url::{Endpoint, LockUrl};

impl LockUrl {
    /// Parses and checks `url`: scheme, hosts, ports, path and every option
    /// (name and value). Errors are [`lock_core::LockErrorKind::InvalidArgument`]
    /// with a message that names the problem.
    pub fn parse(url: &str) -> Result<LockUrl, LockError> {
        let text = url.trim();
        if text.is_empty() {
            return Err(LockError::invalid(format!(
                "the lock service URL is empty: expected {}",
                known_schemes()
            )));
        }
        let err =
            |why: String| LockError::invalid(format!("invalid URL {:?}: {why}", redact_str(text)));
        if let Some(c) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(format!("it contains {c:?}; percent-encode it")));
        }
        let (scheme_text, rest) = match text.split_once("://") {
            Some(parts) => parts,
            None => match text.split_once(':') {
                // `memory:` alone: a backend without servers needs no `//`.
                Some((s, ""))
                    if scheme_named(s)
                        .is_ok_and(|(scheme, _)| scheme.descriptor().servers == Servers::None) =>
                {
                    (s, "")
                }
                _ => {
                    return Err(err(format!(
                        "no scheme: expected one of {} (e.g. redis://{text})",
                        known_schemes()
                    )))
                }
            },
        };
        let (scheme, tls_scheme) = scheme_named(scheme_text)?;
        let backend = scheme.descriptor();
        if rest.contains('#') {
            return Err(err(
                "a URL fragment ('#') is not allowed; percent-encode '#' as %23".into(),
            ));
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let (authority, raw_path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let (raw_userinfo, hosts) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };

        let mut url = LockUrl {
            scheme,
            user: None,
            password: None,
            endpoints: Vec::new(),
            path: percent_decode(raw_path).map_err(|e| err(format!("path: {e}")))?,
            options: BTreeMap::new(),
        };

        if let Some(info) = raw_userinfo {
            if backend.credentials == Credentials::None {
                return Err(err(format!("{scheme}:// takes no user or password")));
            }
            let (user, password) = match info.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (info, None),
            };
            let user = percent_decode(user).map_err(|e| err(format!("user: {e}")))?;
            let password = password
                .map(percent_decode)
                .transpose()
                .map_err(|e| err(format!("password: {e}")))?;
            url.user = (!user.is_empty()).then_some(user);
            url.password = password.filter(|p| !p.is_empty());
            if backend.credentials == Credentials::Pair
                && (url.user.is_none() || url.password.is_none())
            {
                return Err(err(format!(
                    "{scheme}:// credentials are written user:password@"
                )));
            }
        }

        if backend.servers == Servers::None {
            if !hosts.is_empty() || !matches!(url.path.as_str(), "" | "/") {
                return Err(err(format!(
                    "{scheme}:// takes no host and no path (it is in-process)"
                )));
            }
            url.path.clear();
        } else {
            url.endpoints = parse_hosts(backend, hosts).map_err(err)?;
        }

        if let Some(query) = query {
            url.options = parse_query(backend, query).map_err(err)?;
        }
        if tls_scheme {
            if url.options.get("tls").is_some_and(|v| v == "false") {
                return Err(err(format!(
                    "{}:// is {scheme} over TLS: tls=false contradicts it",
                    scheme_text.to_ascii_lowercase()
                )));
            }
            url.options.insert("tls".into(), "true".into());
        }
        (backend.check)(&url).map_err(err)?;
        Ok(url)
    }
}

impl FromStr for LockUrl {
    type Err = LockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LockUrl::parse(s)
    }
}

/// The backend a URL's scheme names, and whether that name turns TLS on.
fn scheme_named(text: &str) -> Result<(Scheme, bool), LockError> {
    let text = text.to_ascii_lowercase();
    for d in backends::ALL {
        if d.names.contains(&text.as_str()) {
            return Ok((d.scheme, false));
        }
        if d.tls_names.contains(&text.as_str()) {
            return Ok((d.scheme, true));
        }
    }
    Err(LockError::invalid(format!(
        "unknown URL scheme {text:?}: expected {}",
        known_schemes()
    )))
}

/// The schemes, as error messages list them.
fn known_schemes() -> String {
    Scheme::ALL
        .iter()
        .map(|s| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Hides the password of a URL that did not parse, for error messages.
fn redact_str(text: &str) -> String {
    let Some(start) = text.find("://").map(|i| i + 3) else {
        return text.to_string();
    };
    let rest = &text[start..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            let hidden = if rest[..at].contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{}{hidden}{}", &text[..start], &rest[at..])
        }
        None => text.to_string(),
    }
}

fn parse_hosts(backend: &Descriptor, hosts: &str) -> Result<Vec<Endpoint>, String> {
    let scheme = backend.scheme;
    if hosts.is_empty() {
        return Err(format!("a {scheme}:// URL needs at least one host"));
    }
    let default_port = scheme.default_port().unwrap_or(0);
    let mut out = Vec::new();
    for item in hosts.split(',') {
        if item.is_empty() {
            return Err(format!("empty host in the host list {hosts:?}"));
        }
        let (host, port) = if let Some(v6) = item.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err(format!("unclosed '[' in host {item:?}"));
            };
            if addr.is_empty()
                || !addr
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
                || !addr.contains(':')
            {
                return Err(format!("invalid IPv6 address {addr:?}"));
            }
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("unexpected {p:?} after ']' in {item:?}"))?,
                ),
            };
            (addr.to_string(), port)
        } else {
            let (host, port) = match item.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (item, None),
            };
            if port.is_some_and(|p| p.contains(':')) {
                return Err(format!("host {item:?} has more than one ':'; write IPv6 addresses in brackets, [::1]:{default_port}"));
            }
            if host.is_empty() {
                return Err(format!("empty host name in {item:?}"));
            }
            if let Some(c) = host
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
            {
                return Err(format!("host name {host:?} contains {c:?}"));
            }
            (host.to_string(), port)
        };
        let port = match port {
            None => default_port,
            Some(p) => match p.parse::<u16>() {
                Ok(0) => return Err(format!("port 0 in {item:?}")),
                Ok(n) if p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(format!("invalid port {p:?} in {item:?} (expected 1-65535)")),
            },
        };
        let endpoint = Endpoint {
            host: host.to_ascii_lowercase(),
            port,
        };
        if out.contains(&endpoint) {
            return Err(format!("{endpoint} is listed twice"));
        }
        out.push(endpoint);
    }
    if let Servers::One { hint } = backend.servers {
        if out.len() > 1 {
            return Err(format!(
                "{scheme}:// takes one server, got {}; {hint}{hosts}",
                out.len()
            ));
        }
    }
    Ok(out)
}

fn parse_query(backend: &Descriptor, query: &str) -> Result<BTreeMap<String, String>, String> {
    let scheme = backend.scheme;
    let mut options = BTreeMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let Some((raw_key, raw_value)) = pair.split_once('=') else {
            return Err(format!("option {pair:?} has no value (write name=value)"));
        };
        let key = percent_decode(raw_key)?;
        let value = percent_decode(raw_value)?;
        let Some(spec) = backend.options.iter().find(|o| o.name == key) else {
            let known = scheme.options();
            return Err(if known.is_empty() {
                format!("{scheme}:// URLs take no options, got {key:?}")
            } else {
                format!(
                    "unknown option {key:?} for {scheme}:// URLs; known: {}",
                    known.join(", ")
                )
            });
        };
        match spec.kind {
            OptionKind::Duration => {
                let d =
                    parse_duration(&value).map_err(|e| format!("option {key}: {}", e.message()))?;
                if d.is_zero() {
                    return Err(format!("option {key} must be above zero"));
                }
            }
            OptionKind::Count => {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("option {key}={value:?} is not a non-negative integer"))?;
            }
            OptionKind::CountOrNone => {
                if value != "none" && value.parse::<u32>().is_err() {
                    return Err(format!(
                        "option {key}={value:?} is neither a non-negative integer nor `none`"
                    ));
                }
            }
            OptionKind::Text => {}
            OptionKind::Bool => {
                if value != "true" && value != "false" {
                    return Err(format!(
                        "option {key}={value:?} is neither `true` nor `false`"
                    ));
                }
            }
        }
        if options.insert(key.clone(), value).is_some() {
            return Err(format!("option {key} is given twice"));
        }
    }
    Ok(options)
}

/// Decodes `%XX` escapes; the result must be UTF-8.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                .ok_or_else(|| format!("bad percent escape in {text:?}"))?;
            out.push(
                u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad percent escape in {text:?}"))?,
            );
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} decodes to invalid UTF-8"))
}

#[cfg(test)]
mod tests {
    // Only the backends' configuration tests compare durations.
    #[cfg(any(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk"
    ))]
    use std::time::Duration;

    use super::*;
    use lock_core::LockErrorKind;

    fn ok(url: &str) -> LockUrl {
        LockUrl::parse(url).unwrap_or_else(|e| panic!("{url:?}: {e}"))
    }

    fn bad(url: &str) -> String {
        let err = LockUrl::parse(url).expect_err(url);
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{url:?}");
        err.to_string()
    }

    fn ep(host: &str, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn memory() {
        for u in ["memory://", "memory:", "MEMORY://", "memory:///", "mem://"] {
            let url = ok(u);
            assert_eq!(url.scheme(), Scheme::Memory);
            assert!(url.endpoints().is_empty());
            assert_eq!(url.to_string(), "memory://");
        }
        assert!(bad("memory://host").contains("no host"));
        assert!(bad("memory:///x").contains("no host"));
        assert!(bad("memory://?ttl=1s").contains("take no options"));
        assert!(bad("memory://u:p@").contains("no user"));
    }

    #[test]
    fn redis() {
        let url =
            ok("redis://127.0.0.1:6380/2?connect_timeout=250ms&request_timeout=1s&prefix=locks%3A");
        assert_eq!(url.scheme(), Scheme::Redis);
        assert_eq!(url.endpoints(), &[ep("127.0.0.1", 6380)]);
        assert_eq!(url.redis_db(), Some(2));
        assert_eq!(url.option("prefix"), Some("locks:"));
        assert_eq!(ok("redis://cache").endpoints(), &[ep("cache", 6379)]);
        assert_eq!(ok("redis://[::1]:7000/").endpoints(), &[ep("::1", 7000)]);
        assert_eq!(ok("redis://[::1]").endpoints(), &[ep("::1", 6379)]);
        let with_pw = ok("redis://alice:s%40cret@h:1/0");
        assert_eq!(with_pw.user(), Some("alice"));
        assert!(with_pw.has_password());
        assert_eq!(with_pw.to_string(), "redis://alice:***@h:1/0");
        assert!(!format!("{with_pw:?}").contains("cret"));
        assert_eq!(ok("redis://:pw@h").to_string(), "redis://:***@h:6379");
    }

    #[cfg(all(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk"
    ))]
    #[test]
    fn tls_options() {
        let tls = ok("rediss://h:6380").redis_config().unwrap();
        assert!(tls.url.starts_with("rediss://h:6380"));
        let r = ok("redis://h?tls=true&ca=/c.pem&cert=/x.pem&key=/k.pem")
            .redis_config()
            .unwrap();
        assert!(r.url.starts_with("rediss://"));
        assert_eq!(r.tls.ca.as_deref(), Some(std::path::Path::new("/c.pem")));
        assert_eq!(r.tls.key.as_deref(), Some(std::path::Path::new("/k.pem")));
        assert!(bad("rediss://h?tls=false").contains("contradicts"));
        assert!(bad("redis://h?tls=yes").contains("neither"));
        let e = ok("etcd://e1?ca=/c.pem").etcd_config().unwrap();
        assert!(e.tls.is_some(), "a CA turns TLS on");
        assert!(ok("etcd://e1").etcd_config().unwrap().tls.is_none());
        assert!(
            ok("etcd://e1?ca=/c.pem&cert=/x.pem").etcd_config().is_err(),
            "cert without key"
        );
        let z = ok("zk://z1?tls=true&ca=/c.pem").zk_config().unwrap();
        assert!(z.tls.is_some());
        assert!(ok("redlock://a,b,c?tls=true")
            .redlock_config()
            .unwrap()
            .nodes[0]
            .starts_with("rediss://"));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_config() {
        let cfg = ok("redis://:p%40ss@h:6380/3?connect_timeout=250ms&request_timeout=2s&max_recheck=5s&prefix=l:")
            .redis_config()
            .unwrap();
        assert_eq!(cfg.url, "redis://:p%40ss@h:6380/3");
        assert_eq!(cfg.connect_timeout, Duration::from_millis(250));
        assert_eq!(cfg.request_timeout, Duration::from_secs(2));
        assert_eq!(cfg.max_recheck, Duration::from_secs(5));
        assert_eq!(cfg.key_prefix, "l:");
        let default = ok("redis://localhost").redis_config().unwrap();
        assert_eq!(default.url, "redis://localhost:6379/0");
        assert_eq!(default.connect_timeout, lock_redis::DEFAULT_CONNECT_TIMEOUT);
        assert!(!default.require_noeviction);
        assert!(
            ok("redis://h?require_noeviction=true")
                .redis_config()
                .unwrap()
                .require_noeviction
        );
        assert!(bad("redis://h?require_noeviction=yes").contains("neither `true` nor `false`"));
        assert!(ok("memory://").redis_config().is_err());
        let synced = ok("redis://h?sync_replicas=2&sync_timeout=50ms")
            .redis_config()
            .unwrap();
        assert_eq!(
            synced.sync_replicas,
            Some(lock_redis::SyncReplicas::new(2, Duration::from_millis(50)))
        );
        let synced = ok("redis://h?sync_replicas=1&request_timeout=300ms")
            .redis_config()
            .unwrap();
        assert_eq!(
            synced.sync_replicas,
            Some(lock_redis::SyncReplicas::new(1, Duration::from_millis(300)))
        );
        assert_eq!(
            ok("redis://h?sync_replicas=0")
                .redis_config()
                .unwrap()
                .sync_replicas,
            None
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_sentinel_config() {
        let url = ok(
            "redis+sentinel://:p%40ss@s1,s2:26380,s3/main/2?request_timeout=300ms&sync_replicas=1",
        );
        assert_eq!(url.scheme(), Scheme::RedisSentinel);
        let cfg = url.redis_sentinel_config().unwrap();
        assert_eq!(
            cfg.url,
            "redis+sentinel://:p%40ss@s1:26379,s2:26380,s3:26379/main/2"
        );
        assert_eq!(cfg.request_timeout, Duration::from_millis(300));
        assert_eq!(
            cfg.sync_replicas,
            Some(lock_redis::SyncReplicas::new(1, Duration::from_millis(300)))
        );
        assert!(!format!("{url}").contains("p%40ss"));
        let tls = ok("rediss+sentinel://s1/main")
            .redis_sentinel_config()
            .unwrap();
        assert_eq!(tls.url, "rediss+sentinel://s1:26379/main/0");
        assert!(bad("redis+sentinel://s1").contains("the name the sentinels monitor"));
        assert!(bad("redis+sentinel://s1/main/x").contains("the name the sentinels monitor"));
        assert!(bad("redis+sentinel://s1/main/1/2").contains("the name the sentinels monitor"));
        assert!(ok("redis://h").redis_sentinel_config().is_err());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_cluster_config() {
        let url = ok("redis+cluster://u:p%40ss@n1,n2:7001,n3?request_timeout=300ms&prefix=app:");
        assert_eq!(url.scheme(), Scheme::RedisCluster);
        let cfg = url.redis_cluster_config().unwrap();
        assert_eq!(cfg.url, "redis+cluster://u:p%40ss@n1:6379,n2:7001,n3:6379");
        assert_eq!(cfg.request_timeout, Duration::from_millis(300));
        assert_eq!(cfg.key_prefix, "app:");
        assert!(!format!("{url}").contains("p%40ss"));
        let tls = ok("rediss+cluster://n1/0").redis_cluster_config().unwrap();
        assert_eq!(tls.url, "rediss+cluster://n1:6379");
        assert!(bad("redis+cluster://n1/2").contains("database 0 only"));
        assert!(bad("redis+cluster://n1/x").contains("database 0 only"));
        assert!(ok("redis://h").redis_cluster_config().is_err());
    }

    #[test]
    fn redlock() {
        let url =
            ok("redlock://a:7001,b:7002,c/1?node_timeout=30ms&retry_count=5&max_extensions=none");
        assert_eq!(
            url.endpoints(),
            &[ep("a", 7001), ep("b", 7002), ep("c", 6379)]
        );
        assert_eq!(url.redis_db(), Some(1));
        assert!(bad("redlock://a:1,a:1").contains("listed twice"));
        assert!(bad("redlock://a:1,,b:2").contains("empty host"));
        assert!(bad("redlock://a:1?retry_count=-1").contains("non-negative integer"));
        assert!(bad("redlock://a:1?max_extensions=lots").contains("none"));
        assert!(bad("redlock://a:1?request_timeout=1s").contains("unknown option"));
        #[cfg(feature = "redlock")]
        assert!(
            ok("redlock://a:1,b:2,c:3?require_noeviction=true")
                .redlock_config()
                .unwrap()
                .require_noeviction
        );
    }

    #[cfg(feature = "redlock")]
    #[test]
    fn redlock_config() {
        let cfg = ok("redlock://u:p@a:7001,b:7002,c/1?node_timeout=30ms&connect_timeout=2s&retry_count=5&retry_delay=10ms&retry_jitter=20ms&max_extensions=7&prefix=x")
            .redlock_config()
            .unwrap();
        assert_eq!(
            cfg.nodes,
            [
                "redis://u:p@a:7001/1",
                "redis://u:p@b:7002/1",
                "redis://u:p@c:6379/1"
            ]
        );
        assert_eq!(cfg.node_timeout, Duration::from_millis(30));
        assert_eq!(cfg.connect_timeout, Duration::from_secs(2));
        assert_eq!(cfg.retry_count, 5);
        assert_eq!(cfg.retry_delay, Duration::from_millis(10));
        assert_eq!(cfg.retry_jitter, Duration::from_millis(20));
        assert_eq!(cfg.max_extensions, Some(7));
        assert_eq!(cfg.key_prefix, "x");
        assert_eq!(cfg.quorum(), 2);
        let none = ok("redlock://a,b,c?max_extensions=none")
            .redlock_config()
            .unwrap();
        assert_eq!(none.max_extensions, None);
        assert_eq!(none.node_timeout, Duration::from_millis(50));
    }

    #[test]
    fn etcd() {
        let url = ok("etcd://e1:2379,e2,[::1]:22379/jobs/nightly?lease_ttl=5s&request_timeout=2s");
        assert_eq!(
            url.endpoints(),
            &[ep("e1", 2379), ep("e2", 2379), ep("::1", 22379)]
        );
        assert_eq!(url.etcd_prefix(), "jobs/nightly/");
        assert_eq!(ok("etcd://e1/jobs/").etcd_prefix(), "jobs/");
        assert_eq!(ok("etcd://e1").etcd_prefix(), "");
        assert_eq!(ok("etcd://e1/").etcd_prefix(), "");
        assert_eq!(ok("etcd://e1?prefix=raw-").etcd_prefix(), "raw-");
        assert_eq!(ok("etcd://root:pw@e1").user(), Some("root"));
        assert!(bad("etcd://e1/a?prefix=b").contains("not both"));
        assert!(bad("etcd://e1/a//b").contains("empty segment"));
        assert!(bad("etcd://root@e1").contains("user:password"));
        assert!(bad("etcd://e1?session_timeout=1s").contains("unknown option"));
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_config() {
        let cfg = ok(
            "etcd://root:pw@e1,e2:1234/locks?lease_ttl=3s&connect_timeout=1s&request_timeout=2s",
        )
        .etcd_config()
        .unwrap();
        assert_eq!(cfg.endpoints, ["e1:2379", "e2:1234"]);
        assert_eq!(cfg.key_prefix, "locks/");
        assert_eq!(cfg.lease_ttl, Duration::from_secs(3));
        assert_eq!(cfg.connect_timeout, Duration::from_secs(1));
        assert_eq!(cfg.request_timeout, Duration::from_secs(2));
        assert_eq!(cfg.user.as_deref(), Some("root"));
        assert_eq!(cfg.password.as_deref(), Some("pw"));
    }

    #[test]
    fn zk() {
        let url = ok("zk://z1:2181,z2:2182,z3/locks/app?session_timeout=6s&chroot=/apps/x");
        assert_eq!(url.scheme(), Scheme::Zk);
        assert_eq!(
            url.endpoints(),
            &[ep("z1", 2181), ep("z2", 2182), ep("z3", 2181)]
        );
        assert_eq!(url.path(), "/locks/app");
        assert_eq!(ok("zookeeper://z1").scheme(), Scheme::Zk);
        assert!(bad("zk://z1/locks/").contains("ends with '/'"));
        assert!(bad("zk://z1/a/../b").contains("'..'"));
        assert!(bad("zk://z1?chroot=apps").contains("must start with '/'"));
        assert!(bad("zk://z1?lease_ttl=1s").contains("unknown option"));
        assert!(bad("zk://z1?session_timeout=0s").contains("above zero"));
        assert!(bad("zk://z1?election=latches").contains("neither \"latch\""));
    }

    #[cfg(feature = "zk")]
    #[test]
    fn zk_config() {
        let cfg = ok("zk://u:p@z1,z2:2182/locks?session_timeout=6s&chroot=/apps/x&connect_timeout=1s&request_timeout=2s")
            .zk_config()
            .unwrap();
        assert_eq!(cfg.connect, "z1:2181,z2:2182/apps/x");
        assert_eq!(cfg.base_path, "/locks");
        assert_eq!(cfg.session_timeout, Duration::from_secs(6));
        assert_eq!(cfg.connect_timeout, Duration::from_secs(1));
        assert_eq!(cfg.request_timeout, Duration::from_secs(2));
        assert_eq!(cfg.auth, vec![("digest".to_string(), b"u:p".to_vec())]);
        assert_eq!(
            ok("zk://z1").zk_config().unwrap().base_path,
            lock_zk::DEFAULT_BASE_PATH
        );
        let election = |url: &str| ok(url).zk_config().unwrap().election;
        assert_eq!(election("zk://z1"), lock_zk::ElectionRecipe::LeaderLatch);
        assert_eq!(
            election("zk://z1?election=latch"),
            lock_zk::ElectionRecipe::LeaderLatch
        );
        assert_eq!(
            election("zk://z1?election=selector"),
            lock_zk::ElectionRecipe::LeaderSelector
        );
    }

    #[test]
    fn bad_urls_say_why() {
        assert!(bad("").contains("empty"));
        assert!(bad("   ").contains("empty"));
        assert!(bad("localhost:6379").contains("e.g. redis://localhost:6379"));
        assert!(bad("127.0.0.1").contains("no scheme"));
        assert!(bad("mysql://h").contains("unknown URL scheme"));
        assert!(bad("redis://").contains("at least one host"));
        assert!(bad("redis:///0").contains("at least one host"));
        assert!(bad("redis://h:notaport").contains("invalid port"));
        assert!(bad("redis://h:").contains("invalid port"));
        assert!(bad("redis://h:0").contains("port 0"));
        assert!(bad("redis://h:65536").contains("invalid port"));
        assert!(bad("redis://h:+80").contains("invalid port"));
        assert!(bad("redis://::1:6379").contains("brackets"));
        assert!(bad("redis://[::1").contains("unclosed"));
        assert!(bad("redis://[zz]").contains("IPv6"));
        assert!(bad("redis://[::1]x").contains("after ']'"));
        assert!(bad("redis://h$st").contains("contains"));
        assert!(bad("redis://a,b").contains("redlock://"));
        assert!(bad("redis://h/x").contains("database number"));
        assert!(bad("redis://h/1/2").contains("database number"));
        assert!(bad("redis://h?connect_timeout").contains("no value"));
        assert!(bad("redis://h?connect_timeout=5").contains("unit"));
        assert!(bad("redis://h?connect_timeout=1s&connect_timeout=2s").contains("twice"));
        assert!(bad("redis://h?ttl=5s").contains("unknown option \"ttl\""));
        assert!(bad("redis://h#frag").contains("fragment"));
        assert!(bad("redis://h w").contains("percent-encode"));
        assert!(bad("redis://h?prefix=%zz").contains("percent escape"));
        assert!(bad("redis://h?prefix=%ff").contains("UTF-8"));
    }

    #[test]
    fn errors_never_show_passwords() {
        for u in [
            "redis://u:hunter2@h:notaport",
            "etcd://root:hunter2@e1/a?prefix=b",
            "redlock://:hunter2@a,a",
        ] {
            let msg = bad(u);
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }

    #[test]
    fn display_round_trips() {
        for u in [
            "memory://",
            "redis://h:6379/2?connect_timeout=1s&prefix=a%20b",
            "redlock://a:1,b:2,c:3?node_timeout=20ms",
            "etcd://[::1]:2379/jobs/?lease_ttl=5s",
            "zk://z1:2181,z2:2181/locks?session_timeout=6s",
        ] {
            let url = ok(u);
            assert_eq!(ok(&url.to_string()), url, "{u}");
        }
    }

    #[test]
    fn option_tables_are_consistent() {
        assert!(Scheme::Memory.options().is_empty());
        for s in [Scheme::Redis, Scheme::Redlock, Scheme::Etcd, Scheme::Zk] {
            assert!(s.options().contains(&"connect_timeout"), "{s}");
            assert!(s.feature().is_some());
            assert!(s.default_port().is_some());
        }
        assert!(Scheme::Memory.is_enabled());
    }

    proptest::proptest! {
        /// Any input at all: an error or a URL, never a panic.
        #[test]
        fn never_panics_on_anything(text in "\\PC{0,60}") {
            if let Err(err) = LockUrl::parse(&text) {
                proptest::prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
            }
        }

        /// URL-shaped input: parses or fails with InvalidArgument; what
        /// parses prints back to the same URL.
        #[test]
        fn url_shaped_inputs_parse_or_fail_cleanly(
            text in "(memory|redis|redlock|etcd|zk|rediss|x)(://|:)([a-z0-9:@%\\[\\],.]{0,20})(/[a-z0-9%/.]{0,8})?(\\?[a-z_=&%0-9]{0,24})?"
        ) {
            match LockUrl::parse(&text) {
                Ok(url) => {
                    if !url.has_password() {
                        proptest::prop_assert_eq!(LockUrl::parse(&url.to_string()).ok(), Some(url));
                    }
                }
                Err(err) => proptest::prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument),
            }
        }
    }
}

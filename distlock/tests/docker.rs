//! Keeps `docker/compose.yml` and `docker/README.md` consistent with each
//! other and with `lock-testbed` (no Docker engine is needed: the files are
//! checked as text).

use std::collections::{BTreeMap, BTreeSet};

const COMPOSE: &str = include_str!("../../docker/compose.yml");
const README: &str = include_str!("../../docker/README.md");

/// Published host ports by service, from `ports: ["HOST_IP:HOST_PORT:CONTAINER_PORT"]` lines.
fn published() -> BTreeMap<String, Vec<(String, u16)>> {
    let mut out: BTreeMap<String, Vec<(String, u16)>> = BTreeMap::new();
    let mut service = None;
    let mut in_services = false;
    for line in COMPOSE.lines() {
        if line == "services:" {
            in_services = true;
            continue;
        }
        if !line.starts_with(' ') && !line.is_empty() && !line.starts_with('#') {
            in_services = false;
        }
        if in_services
            && line.starts_with("  ")
            && !line.starts_with("   ")
            && line.trim_end().ends_with(':')
        {
            service = Some(line.trim().trim_end_matches(':').to_string());
        }
        if let Some(list) = line.trim().strip_prefix("ports:") {
            let svc = service.clone().expect("ports outside a service");
            for mapping in list.trim().trim_matches(['[', ']']).split(',') {
                let mapping = mapping.trim().trim_matches('"');
                let parts: Vec<&str> = mapping.split(':').collect();
                assert_eq!(
                    parts.len(),
                    3,
                    "{svc}: write ports as \"127.0.0.1:HOST:CONTAINER\", got {mapping:?}"
                );
                let port: u16 = parts[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("{svc}: bad port in {mapping:?}"));
                out.entry(svc.clone())
                    .or_default()
                    .push((parts[0].to_string(), port));
            }
        }
    }
    out
}

#[test]
fn ports_are_loopback_only_and_unique() {
    let services = published();
    let mut seen = BTreeSet::new();
    for (svc, ports) in &services {
        for (ip, port) in ports {
            assert_eq!(ip, "127.0.0.1", "{svc} must bind loopback only");
            assert!(seen.insert(*port), "port {port} published twice");
        }
    }
    let expected: BTreeSet<u16> = [
        6379, 7001, 7002, 7003, 7004, 7005, 2379, 22379, 32379, 2181, 2182, 2183,
    ]
    .into();
    assert_eq!(seen, expected, "the documented fixed ports");
    assert_eq!(
        services
            .keys()
            .filter(|s| s.starts_with("redlock-"))
            .count(),
        5
    );
    assert_eq!(
        services.keys().filter(|s| s.starts_with("etcd-")).count(),
        3
    );
    assert_eq!(services.keys().filter(|s| s.starts_with("zk-")).count(), 3);
}

#[test]
fn every_service_has_a_profile() {
    for profile in ["redis", "redlock", "etcd", "zk"] {
        assert!(
            COMPOSE.contains(&format!("profiles: [\"{profile}\"]")),
            "profile {profile}"
        );
        assert!(
            README.contains(&format!("--profile {profile}")),
            "README shows --profile {profile}"
        );
    }
    // Every service either sets its profile or inherits it from an anchor.
    let anchors = COMPOSE.matches("<<: *redlock-node").count()
        + COMPOSE.matches("<<: *etcd-member").count()
        + COMPOSE.matches("<<: *zk-server").count();
    assert_eq!(anchors, 5 + 3 + 3);
}

/// The README's env vars are the ones the testbed reads, and their values
/// are exactly the published ports of the matching services.
#[test]
fn readme_env_vars_match_testbed_and_compose() {
    let services = published();
    let ports_of = |prefix: &str| -> Vec<String> {
        services
            .iter()
            .filter(|(name, _)| name.as_str() == prefix || name.starts_with(&format!("{prefix}-")))
            .flat_map(|(_, ports)| ports.iter().map(|(ip, p)| format!("{ip}:{p}")))
            .collect()
    };
    for (var, service) in [
        (lock_testbed::ENV_TEST_REDIS, "redis"),
        (lock_testbed::ENV_TEST_REDIS_NODES, "redlock"),
        (lock_testbed::ENV_TEST_ETCD, "etcd"),
        (lock_testbed::ENV_TEST_ZK, "zk"),
    ] {
        let line = README
            .lines()
            .find(|l| l.starts_with(&format!("export {var}=")))
            .unwrap_or_else(|| panic!("README exports {var}"));
        let value = line.split_once('=').map(|(_, v)| v).unwrap_or_default();
        let mut listed: Vec<String> = value.split(',').map(str::to_string).collect();
        let mut published = ports_of(service);
        listed.sort();
        published.sort();
        assert_eq!(listed, published, "{var}");
        assert!(
            README.contains(&format!("| `{var}` | `{value}` |")),
            "{var} in the table"
        );
    }
}

/// The distlock URLs in the README parse, and name the published ports.
#[test]
fn readme_urls_parse() {
    let mut n = 0;
    for word in README.split(['`', ' ', '\n']) {
        if ["redis://", "redlock://", "etcd://", "zk://"]
            .iter()
            .any(|s| word.starts_with(s))
        {
            let url = distlock::LockUrl::parse(word).unwrap_or_else(|e| panic!("{word}: {e}"));
            assert!(
                url.endpoints().iter().all(|e| e.host == "127.0.0.1"),
                "{word}"
            );
            n += 1;
        }
    }
    assert!(n >= 4, "README shows a URL per backend");
}

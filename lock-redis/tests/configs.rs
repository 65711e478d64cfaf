//! No configuration makes the Redis backend panic: any durations and
//! prefixes are either refused by `validate` with `InvalidArgument` or work
//! (here: a connect to a loopback port where nothing listens, refused fast).
//!
//! Credentials and names on real redis-servers, each test with its own
//! server: a password in the URL is used and a wrong one is `Unauthorized`;
//! a user without pub/sub rights still releases, with no reconnection storm;
//! no lock name addresses another lock's fencing counter.

use std::time::Duration;

use lock_conformance::{any_duration, closed_port};
use lock_core::{DistributedLock, LockErrorKind, LockName};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{RedisOptions, RespValue};
use proptest::prelude::*;
use tokio::time::{sleep, timeout};

mod support;
use support::{
    client, cmd, config, counter, key_exists, name, opts, start_server, take_tokens, SLACK,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_config_is_refused_or_connects_without_panic(
        connect in any_duration(),
        request in any_duration(),
        recheck in any_duration(),
        prefix in "[a-z: \\t]{0,6}",
    ) {
        let config = RedisLockConfig::new(format!("redis://{}/", closed_port()))
            .connect_timeout(connect)
            .request_timeout(request)
            .max_recheck(recheck)
            .key_prefix(prefix);
        let valid = config.validate();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), RedisLock::connect(config)).await
        });
        let err = outcome
            .expect("a connect to a closed port answers at once")
            .expect_err("nothing listens there");
        match valid {
            Err(e) => {
                prop_assert_eq!(e.kind(), LockErrorKind::InvalidArgument);
                prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
            }
            Ok(()) => prop_assert_eq!(err.kind(), LockErrorKind::Unavailable, "{}", err),
        }
    }
}

/// URLs with a password, well-formed or not: neither the configuration's
/// `Debug` nor the error of a connect shows the password.
#[test]
fn no_password_in_debug_or_errors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let port = closed_port();
    for url in [
        format!("redis://:hunter2@{port}/"),
        format!("redis://user:hunter2@{port}/0"),
        "redis://:hunter2@127.0.0.1:notaport/".to_string(),
        "redis://u:hunter2@[::1/".to_string(),
        "redis://:hunter2@127.0.0.1:1/x".to_string(),
        "hunter2@127.0.0.1:x".to_string(),
        "redis://:hun/ter2@127.0.0.1:1/".to_string(),
    ] {
        let config = RedisLockConfig::new(url.as_str());
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("ter2"),
            "{shown}"
        );
        let err = rt
            .block_on(RedisLock::connect(config))
            .expect_err("nothing listens there");
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.contains("hunter2") && !shown.contains("ter2"),
                "{url}: {shown}"
            );
        }
    }
}

/// A password in the URL is used, and a wrong one is Unauthorized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_in_url_and_wrong_password() {
    let server = start_server(RedisOptions::default()).await;
    assert_eq!(
        cmd(&server, &["CONFIG", "SET", "requirepass", "s3cret"]).await,
        RespValue::Simple("OK".into())
    );
    let port = server.addr().port();
    let ok = RedisLock::connect(config(&format!("redis://:s3cret@127.0.0.1:{port}/3")))
        .await
        .expect("connect with the password");
    let lock = name("auth");
    let g = ok
        .try_acquire(&lock, &opts(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(g.release().await.unwrap());
    let err = RedisLock::connect(config(&format!("redis://:wrong@127.0.0.1:{port}/")))
        .await
        .expect_err("wrong password accepted");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    assert!(
        !err.to_string().contains("wrong"),
        "the password leaked into the error: {err}"
    );
}

/// A user whose ACL allows the keys but no pub/sub channel: releases still
/// succeed (the notification is best effort), and the notifier backs off
/// instead of reconnecting in a storm while a waiter waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_rights_releases_and_causes_no_connection_storm() {
    let server = start_server(RedisOptions::default()).await;
    assert_eq!(
        cmd(
            &server,
            &[
                "ACL",
                "SETUSER",
                "nochan",
                "on",
                ">pw",
                "~*",
                "resetchannels",
                "+@all"
            ]
        )
        .await,
        RespValue::Simple("OK".into())
    );
    let url = format!("redis://nochan:pw@{}/", server.addr());
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("nochan");
    let ttl = Duration::from_secs(4);
    let g = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let connections = |info: RespValue| -> u64 {
        let text = info.as_str().unwrap_or_default().to_string();
        text.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    };
    let before = connections(cmd(&server, &["INFO", "stats"]).await);
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            b.acquire(&lock, &opts(ttl).wait(Duration::from_secs(20)))
                .await
        })
    };
    sleep(Duration::from_secs(3)).await;
    let after = connections(cmd(&server, &["INFO", "stats"]).await);
    assert!(
        after - before <= 12,
        "{} connections in 3 s while SUBSCRIBE is refused: a reconnection storm",
        after - before
    );
    assert!(
        g.release().await.expect("release without channel rights"),
        "the release was refused after the key was deleted"
    );
    let g2 = timeout(ttl + SLACK, waiter)
        .await
        .expect("the waiter re-checks at the holder's TTL")
        .unwrap()
        .expect("the waiter acquires");
    assert!(g2.release().await.unwrap());
}

/// No lock name addresses another lock's fencing counter: the lock named
/// `{x} fencing`-like or `{x}:fencing` is a lock of its own, and taking it
/// changes nothing for `x`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_never_addresses_another_locks_counter() {
    let server = start_server(RedisOptions::default()).await;
    let a = client(&server.url()).await;
    let x = name("counter-owner");
    let before = take_tokens(&a, &x, 2).await;
    for tricky in [format!("{{{x}}}:fencing"), format!("{{{x}}}:released")] {
        let tricky = LockName::new(tricky).unwrap();
        let g = a
            .try_acquire(&tricky, &opts(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{tricky} is free but looked held"));
        assert!(g.release().await.unwrap());
        assert!(!key_exists(&server, &tricky).await);
    }
    let after = take_tokens(&a, &x, 1).await;
    assert!(after > before, "x's tokens went from {before} to {after}");
    assert!(
        counter(&server, &x).await.is_some(),
        "taking the tricky names removed x's counter"
    );
}

//! The fault proxy in front of real Redis servers.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lock_testbed::{
    resp_command, shared_redis, unique_name, Proxy, RedisServer, RedisSet, RespConnection,
    RespValue,
};

fn pong() -> RespValue {
    RespValue::Simple("PONG".into())
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Plain pass-through works and open connections are counted.
#[test]
fn passes_traffic_and_counts_connections() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    assert_ne!(proxy.addr(), redis.addr());
    assert_eq!(proxy.upstream(), redis.addr());
    assert_eq!(proxy.redis_url(), format!("redis://{}/", proxy.addr()));
    let mut a = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    let mut b = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    let key = unique_name("through-proxy");
    assert_eq!(
        a.cmd(&["SET", &key, "v"]).unwrap(),
        RespValue::Simple("OK".into())
    );
    assert_eq!(
        redis.cmd(&["GET", &key]).unwrap(),
        RespValue::Bulk(Some(b"v".to_vec()))
    );
    assert_eq!(b.cmd(&["PING"]).unwrap(), pong());
    wait_for("2 connections", || proxy.connections() == 2);
    drop(a);
    wait_for("1 connection", || proxy.connections() == 1);
    // A large value crosses intact.
    let big = "x".repeat(300_000);
    b.cmd(&["SET", &key, &big]).unwrap();
    assert_eq!(b.cmd(&["STRLEN", &key]).unwrap(), RespValue::Int(300_000));
    assert_eq!(
        b.cmd(&["GET", &key]).unwrap(),
        RespValue::Bulk(Some(big.into_bytes()))
    );
}

/// Blackhole: connects succeed but nothing is answered, on open and new connections;
/// heal resets the connections whose bytes were swallowed (a stream never goes on
/// past a gap), keeps one that sent nothing meanwhile, and new ones work.
#[test]
fn blackhole_makes_clients_time_out_and_heal_restores() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut open = RespConnection::connect(proxy.addr(), Duration::from_millis(500)).unwrap();
    assert_eq!(open.cmd(&["PING"]).unwrap(), pong());

    proxy.blackhole();
    let key = unique_name("swallowed");
    let err = open.cmd(&["SET", &key, "v"]).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let err = resp_command(proxy.addr(), &["PING"], Duration::from_millis(500)).unwrap_err();
    assert!(err.is_timeout(), "new connection: {err}");
    let mut during = RespConnection::connect(proxy.addr(), Duration::from_millis(500)).unwrap();
    assert!(during.cmd(&["PING"]).unwrap_err().is_timeout());
    let mut idle = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    assert_eq!(
        redis.cmd(&["EXISTS", &key]).unwrap(),
        RespValue::Int(0),
        "request leaked"
    );

    proxy.heal();
    let err = open.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "open connection: {err}");
    let err = during.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "connection opened during: {err}");
    assert_eq!(idle.cmd(&["PING"]).unwrap(), pong());
    assert_eq!(
        resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap(),
        pong()
    );
}

/// reset_all: an open connection sees a connection error; new ones work.
#[test]
fn reset_all_is_a_connection_error_and_new_connections_work() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut raw = TcpStream::connect(proxy.addr()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    wait_for("2 connections", || proxy.connections() == 2);

    proxy.reset_all();
    wait_for("0 connections", || proxy.connections() == 0);
    let err = conn.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let mut buf = [0u8; 16];
    let e = raw.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");

    assert_eq!(
        resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap(),
        pong()
    );
}

/// cut: open and new connections are reset until heal; then traffic flows again.
#[test]
fn cut_resets_everything_until_heal() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    proxy.cut();
    wait_for("0 connections", || proxy.connections() == 0);
    assert!(conn.cmd(&["PING"]).unwrap_err().is_connection_error());
    for _ in 0..3 {
        let err = resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap_err();
        assert!(err.is_connection_error(), "{err}");
    }
    proxy.heal();
    assert_eq!(
        resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap(),
        pong()
    );
}

/// Latency slows each direction and keeps order; a reply delay holds only the answer:
/// the server has executed the command while the client still waits.
#[test]
fn latency_and_reply_delay_slow_round_trips_in_order() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_secs(5)).unwrap();
    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    let rtt = started.elapsed();
    assert!(rtt >= Duration::from_millis(200), "round trip {rtt:?}");
    assert!(rtt < Duration::from_secs(2), "round trip {rtt:?}");

    // Pipelined commands keep their order.
    let key = unique_name("order");
    for i in 0..5 {
        conn.send(&["RPUSH", &key, &i.to_string()]).unwrap();
    }
    for i in 1..=5 {
        assert_eq!(conn.read_reply().unwrap(), RespValue::Int(i));
    }

    proxy.set_latency(Duration::ZERO);
    proxy.set_reply_delay(Duration::from_millis(600));
    let held = unique_name("held");
    conn.send(&["SET", &held, "done"]).unwrap();
    let sent = Instant::now();
    wait_for("the server to execute the held SET", || {
        redis.cmd(&["EXISTS", &held]).unwrap() == RespValue::Int(1)
    });
    assert!(
        sent.elapsed() < Duration::from_millis(500),
        "request was delayed too"
    );
    assert_eq!(conn.read_reply().unwrap(), RespValue::Simple("OK".into()));
    assert!(
        sent.elapsed() >= Duration::from_millis(600),
        "reply came after {:?}",
        sent.elapsed()
    );

    proxy.heal();
    let started = Instant::now();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    assert!(started.elapsed() < Duration::from_millis(150));
}

/// Several proxies are independent: a client behind a cut proxy loses its node while
/// another client's proxy to another node keeps working.
#[test]
fn proxies_are_independent() {
    let set = RedisSet::start(2).unwrap();
    let a = Proxy::start(set.nodes()[0].addr()).unwrap();
    let b = Proxy::start(set.nodes()[1].addr()).unwrap();
    let also_a = Proxy::start(set.nodes()[0].addr()).unwrap();
    a.cut();
    b.set_latency(Duration::from_millis(20));
    let t = Duration::from_secs(2);
    assert!(resp_command(a.addr(), &["PING"], t)
        .unwrap_err()
        .is_connection_error());
    assert_eq!(resp_command(b.addr(), &["PING"], t).unwrap(), pong());
    assert_eq!(resp_command(also_a.addr(), &["PING"], t).unwrap(), pong());
    b.blackhole();
    assert!(
        resp_command(b.addr(), &["PING"], Duration::from_millis(300))
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(resp_command(also_a.addr(), &["PING"], t).unwrap(), pong());
}

/// A dead upstream: the client's connection is reset. Dropping the proxy closes its
/// connections and its port.
#[test]
fn dead_upstream_resets_client_and_drop_closes_everything() {
    let mut redis = RedisServer::start().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    redis.kill().unwrap();
    assert!(conn.cmd(&["PING"]).unwrap_err().is_connection_error());
    let err = resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    redis.restart().unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_secs(2)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());

    let addr = proxy.addr();
    drop(proxy);
    let mut raw_err = conn.cmd(&["PING"]).unwrap_err();
    assert!(raw_err.is_connection_error(), "{raw_err}");
    let e = TcpStream::connect(addr).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        s.write_all(b"PING\r\n")?;
        let mut b = [0u8; 8];
        match s.read(&mut b)? {
            0 => Err(std::io::Error::from(ErrorKind::UnexpectedEof)),
            _ => Ok(()),
        }
    });
    assert!(e.is_err(), "proxy port still answers after drop");
    raw_err = resp_command(addr, &["PING"], Duration::from_secs(1)).unwrap_err();
    assert!(raw_err.is_connection_error(), "{raw_err}");
}

/// drop_replies: the server applies what the client sends and the client never
/// hears back (a reply lost after the server applied the request); heal resets
/// that connection (it never goes on to deliver the next reply as the answer
/// to the lost one) and new connections are answered.
#[test]
fn drop_replies_applies_requests_and_swallows_answers() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_millis(400)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    proxy.drop_replies();
    let key = unique_name("applied-unanswered");
    let err = conn.cmd(&["SET", &key, "v"]).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(
        redis.cmd(&["GET", &key]).unwrap(),
        RespValue::Bulk(Some(b"v".to_vec())),
        "the request was not applied"
    );
    // New connections too: applied, unanswered.
    let other = unique_name("applied-unanswered-new");
    let err = resp_command(
        proxy.addr(),
        &["SET", &other, "w"],
        Duration::from_millis(400),
    )
    .unwrap_err();
    assert!(err.is_timeout(), "new connection: {err}");
    assert_eq!(
        redis.cmd(&["GET", &other]).unwrap(),
        RespValue::Bulk(Some(b"w".to_vec()))
    );
    proxy.heal();
    let err = conn.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert_eq!(
        resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap(),
        pong()
    );
}

/// drop_requests: nothing the client sends reaches the server (a one-way
/// partition); heal resets the connection that lost a request, and new
/// connections work.
#[test]
fn drop_requests_never_reach_the_server() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut conn = RespConnection::connect(proxy.addr(), Duration::from_millis(400)).unwrap();
    assert_eq!(conn.cmd(&["PING"]).unwrap(), pong());
    proxy.drop_requests();
    let key = unique_name("never-sent");
    let err = conn.cmd(&["SET", &key, "v"]).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(redis.cmd(&["EXISTS", &key]).unwrap(), RespValue::Int(0));
    proxy.heal();
    let err = conn.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert_eq!(
        resp_command(proxy.addr(), &["PING"], Duration::from_secs(2)).unwrap(),
        pong()
    );
}

/// set_subscriber_delay: a connection that subscribed gets its messages late,
/// while another connection through the same proxy is answered at once.
#[test]
fn subscriber_delay_holds_only_pubsub_connections() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let channel = unique_name("delayed-channel");
    let mut sub = RespConnection::connect(proxy.addr(), Duration::from_secs(5)).unwrap();
    sub.send(&["SUBSCRIBE", &channel]).unwrap();
    sub.read_reply().unwrap();
    let delay = Duration::from_millis(700);
    proxy.set_subscriber_delay(delay);
    let mut plain = RespConnection::connect(proxy.addr(), Duration::from_secs(5)).unwrap();
    let started = Instant::now();
    assert_eq!(plain.cmd(&["PING"]).unwrap(), pong());
    assert!(
        started.elapsed() < delay,
        "a plain connection waited {:?}",
        started.elapsed()
    );
    let published = Instant::now();
    assert_eq!(
        redis.cmd(&["PUBLISH", &channel, "m"]).unwrap(),
        RespValue::Int(1)
    );
    sub.read_reply().unwrap();
    assert!(
        published.elapsed() >= delay,
        "the message came after {:?}",
        published.elapsed()
    );
}

/// replay_messages: a subscriber gets every message twice, the copy late,
/// and replies to its commands stay whole and in order.
#[test]
fn replayed_messages_arrive_twice_the_copy_late() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let channel = unique_name("replayed-channel");
    let mut sub = RespConnection::connect(proxy.addr(), Duration::from_secs(5)).unwrap();
    sub.send(&["SUBSCRIBE", &channel]).unwrap();
    sub.read_reply().unwrap();
    let after = Duration::from_millis(400);
    proxy.replay_messages(after);
    let published = Instant::now();
    for m in ["one", "two"] {
        assert_eq!(
            redis.cmd(&["PUBLISH", &channel, m]).unwrap(),
            RespValue::Int(1)
        );
    }
    let message = |m: &str| {
        RespValue::Array(Some(vec![
            RespValue::Bulk(Some(b"message".to_vec())),
            RespValue::Bulk(Some(channel.clone().into_bytes())),
            RespValue::Bulk(Some(m.as_bytes().to_vec())),
        ]))
    };
    assert_eq!(sub.read_reply().unwrap(), message("one"));
    assert_eq!(sub.read_reply().unwrap(), message("two"));
    assert!(published.elapsed() < after, "the first copies came late");
    assert_eq!(sub.read_reply().unwrap(), message("one"));
    assert_eq!(sub.read_reply().unwrap(), message("two"));
    assert!(
        published.elapsed() >= after,
        "the second copies came after {:?}",
        published.elapsed()
    );
    proxy.heal();
    assert_eq!(
        redis.cmd(&["PUBLISH", &channel, "three"]).unwrap(),
        RespValue::Int(1)
    );
    assert_eq!(sub.read_reply().unwrap(), message("three"));
    sub.set_timeout(Duration::from_millis(600)).unwrap();
    assert!(
        sub.read_reply().unwrap_err().is_timeout(),
        "a message was replayed after heal"
    );
}

/// A request on its way through a slow link still reaches the server when
/// the client resets its connection meanwhile (bytes on the wire arrive
/// before the reset behind them): the server applies what the client gave
/// up on.
#[test]
fn a_delayed_request_arrives_after_its_client_reset_the_connection() {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    proxy.set_latency(Duration::from_millis(300));
    let key = unique_name("late-after-reset");
    let mut raw = TcpStream::connect(proxy.addr()).unwrap();
    let cmd = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
    raw.write_all(cmd.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // Close with RST: SO_LINGER 0.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on an open fd with a correctly sized linger struct.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&raw),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    drop(raw);
    assert_eq!(redis.cmd(&["EXISTS", &key]).unwrap(), RespValue::Int(0));
    wait_for("the late SET", || {
        redis.cmd(&["EXISTS", &key]).unwrap() == RespValue::Int(1)
    });
}

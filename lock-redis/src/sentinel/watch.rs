//! The `+switch-master` watcher: one pub/sub connection to one sentinel
//! at a time, subscribed to the announcements of failovers; one of the
//! client's primary makes the route look at the sentinels at once (see
//! [`crate::route::Route::look`]), as does every (re)subscription (an
//! announcement may have gone unheard while no sentinel was subscribed).

use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

use crate::route::Route;

/// The channel sentinels announce a primary's change on:
/// `<master name> <old ip> <old port> <new ip> <new port>`.
const SWITCH_MASTER: &str = "+switch-master";
/// How often the subscription is pinged, to notice a dead sentinel.
const PING_INTERVAL: Duration = Duration::from_secs(5);
/// The pause before trying the sentinels again when none could be subscribed.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Starts the watcher of `route` (which it holds weakly); it ends when
/// `stop`'s sender is dropped with the route.
pub(crate) fn spawn(route: Weak<Route>, stop: watch::Receiver<()>) {
    tokio::spawn(run(route, stop));
}

async fn run(route: Weak<Route>, mut stop: watch::Receiver<()>) {
    loop {
        let Some(order) = route
            .upgrade()
            .and_then(|r| r.sentinels().map(|s| s.order()))
        else {
            return;
        };
        for i in order {
            if !watch_one(&route, i, &mut stop).await {
                return;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RETRY_PAUSE) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Subscribes on sentinel `i` and serves the announcements until the
/// connection fails (true: try the next sentinel) or the route is gone
/// (false).
async fn watch_one(route: &Weak<Route>, i: usize, stop: &mut watch::Receiver<()>) -> bool {
    let Some(strong) = route.upgrade() else {
        return false;
    };
    let Some(sentinels) = strong.sentinels() else {
        return false;
    };
    let master = sentinels.target.master.clone();
    let sentinel = sentinels.target.sentinels[i].clone();
    let client = match sentinels.client(i) {
        Ok(client) => client,
        Err(e) => {
            tracing::debug!(%sentinel, error = %e, "distlock redis: cannot watch this sentinel");
            return true;
        }
    };
    let limit = sentinels_timeout(&strong);
    drop(strong);
    let subscribed = tokio::time::timeout(limit, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(SWITCH_MASTER).await?;
        Ok::<_, redis::RedisError>(pubsub.split())
    })
    .await;
    let (mut sink, mut stream) = match subscribed {
        Ok(Ok(split)) => split,
        Ok(Err(e)) => {
            tracing::debug!(%sentinel, error = %e, "distlock redis: cannot subscribe to this sentinel's failover announcements");
            return true;
        }
        Err(_) => {
            tracing::debug!(%sentinel, "distlock redis: this sentinel did not confirm the subscription in time");
            return true;
        }
    };
    // Announcements made while nobody listened are unheard: look now.
    if !look(route).await {
        return false;
    }
    loop {
        tokio::select! {
            _ = stop.changed() => return false,
            msg = stream.next() => {
                let Some(msg) = msg else {
                    tracing::debug!(%sentinel, "distlock redis: the sentinel closed the watch connection");
                    return true;
                };
                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                if payload.split(' ').next() == Some(master.as_str()) {
                    tracing::debug!(%sentinel, %payload, "distlock redis: a sentinel announced a failover");
                    if !look(route).await {
                        return false;
                    }
                }
            }
            () = tokio::time::sleep(PING_INTERVAL) => {
                match tokio::time::timeout(limit, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    _ => {
                        tracing::debug!(%sentinel, "distlock redis: the sentinel did not answer PING; watching another");
                        return true;
                    }
                }
            }
        }
    }
}

/// The route looks at the sentinels now; false if it is gone.
async fn look(route: &Weak<Route>) -> bool {
    match route.upgrade() {
        Some(route) => {
            let budget = route.connect_timeout();
            route.look(true, budget).await;
            true
        }
        None => false,
    }
}

/// How long one subscription or ping may take: the route's connect timeout.
fn sentinels_timeout(route: &Route) -> Duration {
    route.connect_timeout()
}

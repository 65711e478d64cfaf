//! A Redis Cluster as a source of release notifications: which primary
//! owns a channel's slot (the slot map, from `CLUSTER SLOTS`), and a
//! client of that primary for the notifier's own connection to it.

use std::collections::HashMap;
use std::fmt;

use lock_core::TlsConfig;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::RedisResult;

use crate::kit::cluster::{key_slot, parse_cluster_slots, ClusterConn, ClusterTarget};
use crate::kit::connect::open_client;

/// A Redis Cluster the notifier listens to ([`NotifyNode::cluster`]):
/// each channel is subscribed with `SSUBSCRIBE` on a connection of its
/// own to the primary that owns the channel's slot (never on a connection
/// that carries requests, and never through redis-rs's cluster pub/sub,
/// which loses subscriptions when slots move). A slot that moves, a
/// failover, or a dropped connection makes the channel unconfirmed; its
/// waiters get [`Wake::Subscribed`] once it is subscribed again at the
/// slot's owner.
///
/// [`NotifyNode::cluster`]: super::NotifyNode::cluster
/// [`Wake::Subscribed`]: super::Wake::Subscribed
pub struct NotifyCluster {
    conn: ClusterConn,
    target: ClusterTarget,
    tls: TlsConfig,
    address_map: HashMap<String, String>,
}

impl fmt::Debug for NotifyCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifyCluster")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl NotifyCluster {
    /// The cluster of `target`: its slot map is read through `conn` (the
    /// client's request connection; only `CLUSTER SLOTS` is sent on it),
    /// and the notifier connects to each primary with the credentials
    /// and scheme of `target`, the TLS files of `tls`, at the address
    /// `address_map` gives for the one the node announces (`host:port` to
    /// `host:port`; an address not in it is used as it is).
    pub fn new(
        conn: ClusterConn,
        target: ClusterTarget,
        tls: TlsConfig,
        address_map: &[(String, String)],
    ) -> Self {
        Self {
            conn,
            target,
            tls,
            address_map: address_map.iter().cloned().collect(),
        }
    }

    /// The slot map now, as the primary announced at `from` sees it if
    /// given (a node that just gave a slot up, or named its new owner,
    /// knows where it went; another may not have heard yet), else as any
    /// node sees it (also when `from` cannot be asked).
    pub(super) async fn slot_map(&self, from: Option<&str>) -> RedisResult<SlotMap> {
        let mut conn = self.conn.clone();
        if let Some(node) = from.and_then(route_to) {
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let answer = conn
                .raw()
                .route_command(cmd, RoutingInfo::SingleNode(node))
                .await
                .and_then(|v| v.extract_error());
            if let Some(map) = answer.ok().as_ref().and_then(parse_cluster_slots) {
                return Ok(SlotMap(map));
            }
        }
        Ok(SlotMap(conn.slots().await?))
    }

    /// A RESP3 client of the primary announced at `addr`.
    pub(super) fn client(&self, addr: &str) -> Result<redis::Client, String> {
        node_client(&self.target, &self.tls, &self.address_map, addr)
    }
}

/// A RESP3 client of the node of `target` announced at `addr`, reached
/// where `address_map` says, with the TLS files of `tls`.
fn node_client(
    target: &ClusterTarget,
    tls: &TlsConfig,
    address_map: &HashMap<String, String>,
    addr: &str,
) -> Result<redis::Client, String> {
    let at = address_map.get(addr).map_or(addr, String::as_str);
    let url = format!("{}?protocol=3", target.node_url(at));
    open_client(&url, tls).map_err(|e| e.to_string())
}

/// The route of a request to the node announced at `addr` (`host:port`).
fn route_to(addr: &str) -> Option<SingleNodeRoutingInfo> {
    let (host, port) = addr.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.parse().ok()?,
    })
}

/// Slot ranges (inclusive) and the announced address of their primary.
#[derive(Debug, Default)]
pub(super) struct SlotMap(Vec<(u16, u16, String)>);

impl SlotMap {
    /// The primary that owns `channel`'s slot, if any does.
    pub(super) fn owner(&self, channel: &str) -> Option<&str> {
        let slot = key_slot(channel.as_bytes());
        self.0
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, addr)| addr.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_clients_speak_resp3_where_the_address_map_says() {
        let map: HashMap<String, String> =
            [("10.0.0.1:7000".to_string(), "127.0.0.1:17000".to_string())].into();
        for (url, tls) in [
            ("redis+cluster://u:secret@10.0.0.1:7000", false),
            ("rediss+cluster://u:secret@10.0.0.1:7000", true),
        ] {
            let target = ClusterTarget::parse(url).unwrap().unwrap();
            let client =
                node_client(&target, &TlsConfig::default(), &map, "10.0.0.1:7000").unwrap();
            let info = client.get_connection_info();
            let settings = info.redis_settings();
            assert_eq!(settings.protocol(), redis::ProtocolVersion::RESP3);
            assert_eq!(settings.username(), Some("u"));
            let shown = format!("{:?}", info.addr());
            assert!(shown.contains("17000"), "{shown}");
            assert_eq!(
                matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }),
                tls
            );
            // An address not in the map is used as it is.
            let direct =
                node_client(&target, &TlsConfig::default(), &map, "10.0.0.2:7001").unwrap();
            assert!(format!("{:?}", direct.get_connection_info().addr()).contains("7001"));
        }
    }

    #[test]
    fn the_owner_is_found_by_range() {
        let map = SlotMap(vec![
            (0, 5460, "a:1".into()),
            (5461, 10922, "b:2".into()),
            (10923, 16383, "c:3".into()),
        ]);
        assert_eq!(map.owner("foo"), Some("c:3"));
        assert_eq!(SlotMap::default().owner("foo"), None);
    }
}

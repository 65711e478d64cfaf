//! One subscription-only RESP3 connection of the cluster notifier to one
//! primary: `SSUBSCRIBE`/`SUNSUBSCRIBE` of one channel per command and
//! `PING`, nothing else, each reply checked against its request.
//!
//! redis-rs 1.8 takes a `sunsubscribe` push for the reply of the oldest
//! request in flight (it expects one for its own `SUNSUBSCRIBE`): when the
//! server unsubscribes the connection itself (the channel's slot left the
//! node) while a request is in flight, that request gets the push and its
//! own reply goes to the next one. No lock request ever travels on this
//! connection, and every reply that does not answer its request (the
//! kind and the channel of a confirmation, `PONG`) fails the connection,
//! which is then opened again: a desynchronised connection never lasts.
//! Every push (confirmations included) also reaches the notifier's push
//! channel, tagged with the connection's id.

use std::collections::HashSet;
use std::fmt;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{ErrorKind, PushInfo, PushKind, RedisError, ServerErrorKind, Value};
use tokio::sync::mpsc;

use super::connection::Timeouts;

/// A push from the connection with this id.
pub(super) type Push = (u64, PushInfo);

/// Why a channel could not be subscribed at a node.
#[derive(Debug)]
pub(super) enum Refused {
    /// The node does not serve the channel's slot (now): `MOVED`, `ASK`,
    /// `TRYAGAIN`, `CLUSTERDOWN`; the slot map needs a refresh. With the
    /// node a `MOVED` or `ASK` named.
    Elsewhere(String, Option<String>),
    /// The connection failed, or answered something else.
    Failed(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Elsewhere(why, _) | Refused::Failed(why) => f.write_str(why),
        }
    }
}

/// The connection to one primary, and the channels it is subscribed to.
pub(super) struct Shard {
    /// The id its pushes carry.
    pub(super) id: u64,
    conn: MultiplexedConnection,
    /// The channels subscribed here, as far as the replies and pushes tell.
    pub(super) on_server: HashSet<String>,
    /// Whether the connection proved itself (a reply that answered).
    pub(super) healthy: bool,
}

impl Shard {
    /// Opens a RESP3 connection with `client` (which must ask for RESP3),
    /// its pushes sent to `pushes` with `id`.
    pub(super) async fn open(
        client: &redis::Client,
        id: u64,
        pushes: mpsc::UnboundedSender<Push>,
        t: Timeouts,
    ) -> Result<Self, String> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(t.connect))
            .set_response_timeout(Some(t.request))
            .set_push_sender(move |info: PushInfo| pushes.send((id, info)));
        let opening = client.get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(t.connect, opening).await {
            Ok(Ok(conn)) => Ok(Self {
                id,
                conn,
                on_server: HashSet::new(),
                healthy: false,
            }),
            Ok(Err(e)) => Err(format!("connect: {e}")),
            Err(_) => Err(format!("connect: no answer within {:?}", t.connect)),
        }
    }

    /// One command, its server errors as errors.
    async fn request(&mut self, cmd: &redis::Cmd, t: Timeouts) -> Result<Value, RedisError> {
        match tokio::time::timeout(t.request, self.conn.req_packed_command(cmd)).await {
            Ok(Ok(Value::ServerError(e))) => Err(RedisError::from(e)),
            Ok(reply) => reply,
            Err(_) => Err(RedisError::from((
                ErrorKind::Io,
                "no reply within the request timeout",
                format!("{:?}", t.request),
            ))),
        }
    }

    /// `SSUBSCRIBE channel`; on success the channel is on the server.
    pub(super) async fn subscribe(&mut self, channel: &str, t: Timeouts) -> Result<(), Refused> {
        let cmd = redis::cmd("SSUBSCRIBE").arg(channel).clone();
        match self.request(&cmd, t).await {
            Ok(reply) if confirms(&reply, &PushKind::SSubscribe, channel) => {
                self.healthy = true;
                self.on_server.insert(channel.to_string());
                Ok(())
            }
            Ok(reply) => Err(Refused::Failed(format!(
                "SSUBSCRIBE {channel}: answered {reply:?}"
            ))),
            Err(e) if elsewhere(&e) => Err(Refused::Elsewhere(
                format!("SSUBSCRIBE {channel}: {e}"),
                e.redirect_node().map(|(addr, _)| addr.to_string()),
            )),
            Err(e) => Err(Refused::Failed(format!("SSUBSCRIBE {channel}: {e}"))),
        }
    }

    /// `SUNSUBSCRIBE channel`; on success the channel is off the server.
    pub(super) async fn unsubscribe(&mut self, channel: &str, t: Timeouts) -> Result<(), String> {
        let cmd = redis::cmd("SUNSUBSCRIBE").arg(channel).clone();
        match self.request(&cmd, t).await {
            Ok(reply) if confirms(&reply, &PushKind::SUnsubscribe, channel) => {
                self.on_server.remove(channel);
                Ok(())
            }
            Ok(reply) => Err(format!("SUNSUBSCRIBE {channel}: answered {reply:?}")),
            Err(e) => Err(format!("SUNSUBSCRIBE {channel}: {e}")),
        }
    }

    /// `PING`, answered `PONG`.
    pub(super) async fn ping(&mut self, t: Timeouts) -> Result<(), String> {
        match self.request(&redis::cmd("PING"), t).await {
            Ok(Value::SimpleString(s)) if s == "PONG" => {
                self.healthy = true;
                Ok(())
            }
            Ok(reply) => Err(format!("PING: answered {reply:?}")),
            Err(e) => Err(format!("PING: {e}")),
        }
    }
}

/// Whether `reply` is the confirmation of kind `kind` for `channel`.
fn confirms(reply: &Value, kind: &PushKind, channel: &str) -> bool {
    match reply {
        Value::Push { kind: k, data } => {
            k == kind
                && matches!(data.first(), Some(Value::BulkString(c)) if c == channel.as_bytes())
        }
        _ => false,
    }
}

/// Whether `e` says the channel's slot is not (or not yet) served here.
fn elsewhere(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_confirms_only_its_own_request() {
        let push = |kind: PushKind, channel: &str| Value::Push {
            kind,
            data: vec![Value::BulkString(channel.into()), Value::Int(1)],
        };
        assert!(confirms(
            &push(PushKind::SSubscribe, "a"),
            &PushKind::SSubscribe,
            "a"
        ));
        // A server-sent sunsubscribe taken for the reply of an SSUBSCRIBE.
        assert!(!confirms(
            &push(PushKind::SUnsubscribe, "b"),
            &PushKind::SSubscribe,
            "a"
        ));
        // Another channel's confirmation.
        assert!(!confirms(
            &push(PushKind::SUnsubscribe, "b"),
            &PushKind::SUnsubscribe,
            "a"
        ));
        // A PONG taken for the reply of a SUNSUBSCRIBE.
        assert!(!confirms(
            &Value::SimpleString("PONG".into()),
            &PushKind::SUnsubscribe,
            "a"
        ));
    }
}

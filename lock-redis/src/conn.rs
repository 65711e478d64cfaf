//! [`Conn`]: the connection a request goes through, to one server or to a
//! Redis Cluster; both carry the same commands and scripts.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

use crate::kit::cluster::ClusterConn;

/// A connection requests go through: to one server (re-established by
/// redis-rs's connection manager), or to a Redis Cluster (each request to
/// its slot's owner, see [`ClusterConn`]). Cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server: the single server, or the primary Sentinel names.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConn),
}

impl Conn {
    /// `cmd`, a command without keys that concerns `key` (`WAIT` after a
    /// write to it), to the server that holds `key`: the one server, or
    /// the owner of its slot.
    pub(crate) async fn query_for_key<T: FromRedisValue>(
        &mut self,
        key: &str,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match self {
            Conn::Single(conn) => cmd.query_async(conn).await,
            Conn::Cluster(conn) => conn.on_owner_of(key, cmd).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

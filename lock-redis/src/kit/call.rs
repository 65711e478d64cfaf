//! [`ScriptCall`]: one call of a loaded Lua script, written straight into
//! the `EVALSHA` command that goes on the wire.
//!
//! `redis::Script`'s own invocation copies every key and argument into a
//! vector of its own and then again into the command, two allocations per
//! key and argument on every acquire and release; this writes each once,
//! into the command's single buffer. As with `Script::invoke_async`, a
//! server that does not know the script (`NOSCRIPT`: restarted, flushed, a
//! failover to a replica that never saw it) is sent `SCRIPT LOAD` and the
//! call once more.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// One call of `script` with its keys, then its arguments (added with
/// [`ScriptCall::arg`]).
pub struct ScriptCall<'a> {
    script: &'a Script,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys` (all of them: `EVALSHA` names the key
    /// count before the keys), without arguments yet.
    pub fn new(script: &'a Script, keys: &[&str]) -> Self {
        let bytes = 64 + keys.iter().map(|k| k.len()).sum::<usize>() * 2;
        let mut cmd = Cmd::with_capacity(keys.len() * 2 + 8, bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        Self { script, cmd }
    }

    /// Adds an argument (`ARGV[n]`, in the order added).
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call on `conn`; on `NOSCRIPT`, loads the script and sends
    /// it once more.
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            done => done,
        }
    }
}

/// A TTL in whole milliseconds for `PX`/`PEXPIRE`, rounded UP so that the
/// server never expires the key before the validity the client computes.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    let ms = ttl.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(Duration::from_millis(1)), 1);
        assert_eq!(ttl_millis(Duration::from_nanos(1)), 1);
        assert_eq!(ttl_millis(Duration::from_secs(30)), 30_000);
    }
}

//! [`Lua`], a script with its source, and [`ScriptCall`]: one call of it,
//! written straight into the `EVALSHA` command that goes on the wire.
//!
//! `redis::Script`'s own invocation copies every key and argument into a
//! vector of its own and then again into the command, two allocations per
//! key and argument on every acquire and release; this writes each once,
//! into the command's single buffer. A server that does not know the
//! script (`NOSCRIPT`: restarted, flushed, a failover to a replica that
//! never saw it) is sent the same call as `EVAL` of the script's source,
//! which runs it and caches it there: one request to the node the
//! `EVALSHA` went to, where `SCRIPT LOAD` through a cluster connection
//! would go to every primary.

use std::borrow::Cow;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{
    Arg, Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs,
};

/// A Lua script: its source and its SHA1 digest (what `EVALSHA` names).
#[derive(Clone, Debug)]
pub struct Lua {
    hash: String,
    source: Cow<'static, str>,
}

impl Lua {
    /// The script with this source.
    pub fn new(source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        let hash = Script::new(&source).get_hash().to_string();
        Self { hash, source }
    }

    /// The SHA1 digest of the source, in hex, as `SCRIPT LOAD` answers it.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The source.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// One call of `script` with its keys, then its arguments (added with
/// [`ScriptCall::arg`]).
pub struct ScriptCall<'a> {
    script: &'a Lua,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys` (all of them: `EVALSHA` names the key
    /// count before the keys), without arguments yet.
    pub fn new(script: &'a Lua, keys: &[&str]) -> Self {
        let bytes = 64 + keys.iter().map(|k| k.len()).sum::<usize>() * 2;
        let mut cmd = Cmd::with_capacity(keys.len() * 2 + 8, bytes);
        cmd.arg("EVALSHA").arg(script.hash()).arg(keys.len());
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

    /// Sends the call on `conn`; on `NOSCRIPT`, sends it once more as
    /// `EVAL` of the source (the first call did not run: nothing is done
    /// twice).
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.as_eval().query_async(conn).await
            }
            done => done,
        }
    }

    /// The call as `EVAL <source>` with the same key count, keys and
    /// arguments.
    fn as_eval(&self) -> Cmd {
        let mut eval = Cmd::with_capacity(self.cmd.args_iter().len(), self.script.source().len());
        eval.arg("EVAL").arg(self.script.source());
        for arg in self.cmd.args_iter().skip(2) {
            if let Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
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
    fn noscript_falls_back_to_eval_of_the_source() {
        let lua = Lua::new("return KEYS[1]");
        assert_eq!(lua.hash(), Script::new("return KEYS[1]").get_hash());
        let mut call = ScriptCall::new(&lua, &["k1", "k2"]);
        call.arg("a").arg(7);
        let mut eval = redis::cmd("EVAL");
        eval.arg("return KEYS[1]")
            .arg(2)
            .arg("k1")
            .arg("k2")
            .arg("a")
            .arg(7);
        assert_eq!(
            call.as_eval().get_packed_command(),
            eval.get_packed_command()
        );
    }

    #[test]
    fn ttl_rounds_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(Duration::from_millis(1)), 1);
        assert_eq!(ttl_millis(Duration::from_nanos(1)), 1);
        assert_eq!(ttl_millis(Duration::from_secs(30)), 30_000);
    }
}

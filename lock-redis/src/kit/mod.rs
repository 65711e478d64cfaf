//! The toolkit for backends built on Redis: the pieces that
//! [`RedisLock`](crate::RedisLock), `lock-redlock` (Redlock over N nodes) and
//! the Redis fence of `lock-fence` share.
//!
//! - [`layout`]: the keys of one lock name, owner tokens, key prefixes;
//! - [`scripts`]: the Lua scripts (Lua source under `src/kit/lua/`);
//! - [`list`]: listing the held locks;
//! - [`errors`]: the mapping of `redis` errors to error kinds;
//! - [`call`]: a script with its source ([`call::Lua`]) and one call of
//!   it, written straight into its `EVALSHA` command (`EVAL` of the source
//!   on `NOSCRIPT`);
//! - [`cluster`]: `redis+cluster://` URLs and a connection to a Redis
//!   Cluster that follows only the redirections that prove a command did
//!   not run;
//! - [`connect`]: a `redis::Client` for a URL with TLS files, and URLs
//!   shown without their password;
//! - [`notify`]: release notifications over pub/sub, for waiters;
//! - [`renew`]: renewal batching, many guards' renewals in one request;
//! - [`place`]: how long a waiter's place in a line lasts on the server;
//! - [`eviction`]: the server's eviction policy, checked at connect.
//!
//! Applications do not need this module: they use
//! [`RedisLock`](crate::RedisLock) and [`RedisLockConfig`](crate::RedisLockConfig).
//! It is for crates that build a lock backend on Redis, and its API may
//! change between minor versions.

pub mod call;
pub mod cluster;
pub mod connect;
pub mod errors;
pub mod eviction;
pub(crate) mod host_list;
pub mod layout;
pub mod list;
pub mod notify;
pub mod place;
pub mod renew;
pub mod scripts;

//! Redis Sentinel: the primary of a Sentinel-managed deployment, named by
//! its sentinels (`redis+sentinel://` URLs, see [`target`]), found
//! ([`ask`]) and followed across failovers ([`watch`] and
//! [`crate::route`]).

pub(crate) mod ask;
pub(crate) mod target;
pub(crate) mod watch;

pub(crate) use ask::Sentinels;
pub(crate) use target::SentinelTarget;

//! The Lua scripts of the mutex, the read-write lock, the semaphore and
//! Redlock's line of waiters, shared by `lock-redis` and `lock-redlock` (the
//! keys they work on: [`layout`](super::layout)).
//!
//! Each script is Lua source under `lua/`, put together at compile time:
//! its own text and the fragments it shares with other scripts
//! (`lua/fragments/`), each `.lua` file pulled in with `include_str!`. A
//! fragment that takes keys or arguments has one file per use (the
//! `next_fence!("KEYS[3]")` of the read-write lock is
//! `fragments/next_fence_keys3.lua`): the scripts are plain text, with no
//! templating at run time.
//!
//! Scripts are sent with `EVALSHA`, and as `EVAL` of their source after a
//! `NOSCRIPT` reply ([`super::call::ScriptCall`]). [`Scripts::cluster`] is
//! the set for a Redis Cluster, written from the same sources.

use super::call::Lua;
use super::list::LIST_PAGE;
use super::renew::{RENEW_BATCH, RENEW_BATCH_ANY_SLOT};

/// The server's clock in ms, as Lua code defining `now` (shared by the
/// read-write and permit scripts, which keep each holder's expiry in it).
macro_rules! now_ms {
    () => {
        include_str!("lua/fragments/now_ms.lua")
    };
}

/// `next_fence!(counter)`: the next fencing token from the counter
/// `counter` (see [`ACQUIRE_FENCED`]), as Lua code defining `fence`; needs
/// `t` from `now_ms!`.
macro_rules! next_fence {
    ("KEYS[2]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/next_fence_keys2.lua"))
    };
    ("KEYS[3]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/next_fence_keys3.lua"))
    };
}

/// The mutex queue's waiters, as Lua code defining `now` (ms) and
/// `next_waiter()` (drops lapsed waiters, returns the first member or nil);
/// needs `t` = `TIME` and the queue keys `KEYS[3]`, `KEYS[4]`. Shared by the
/// mutex and the election, whose queues are alike.
macro_rules! mutex_waiters {
    () => {
        include_str!("lua/fragments/mutex_waiters.lua")
    };
}

/// A caller that did not get the lock takes (or renews) its place in the
/// queue `KEYS[3]`/`KEYS[4]` as the member `me` when `ARGV[3]` is `1`
/// (lasting `ARGV[4]` ms), and defines `last` (see [`ACQUIRE_FENCED`]).
macro_rules! mutex_wait {
    () => {
        include_str!("lua/fragments/mutex_wait.lua")
    };
}

/// The mutex queue's helpers, as Lua code defining `now` (ms),
/// `next_waiter()` (drops lapsed waiters, returns the first member or nil)
/// and `hand_to(member)` (the lock to that waiter with its TTL, its
/// description and a new fencing token, announced on the release channel);
/// needs `t` = `TIME` and the keys of [`ACQUIRE_FENCED`].
macro_rules! mutex_queue {
    () => {
        concat!(
            mutex_waiters!(),
            include_str!("lua/fragments/mutex_queue_1.lua"),
            next_fence!("KEYS[2]"),
            include_str!("lua/fragments/mutex_queue_2.lua"),
        )
    };
}

/// Mutex acquire with a fencing token, atomically, in arrival order.
/// `KEYS[1]` = lock key, `KEYS[2]` = fencing counter, `KEYS[3]` = the
/// waiting queue (`{key} queue`: `<owner token> <ttl ms>` scored by arrival
/// µs; `<owner token> <ttl ms> <description>` for a waiter that describes
/// itself), `KEYS[4]` = when each waiter lapses (`{key} lapse`: the same
/// members scored by lapse ms), `KEYS[5]` = release channel, `KEYS[6]` = the
/// holder's description (`{key} holder`: `<owner token> <description>`,
/// with the lock key's expiry); `ARGV[1]` = owner token, `ARGV[2]` = ttl
/// ms, `ARGV[3]` = `1` to take a place in the queue if the lock is not free
/// ('' for a single try), `ARGV[4]` = how long that place lasts unless
/// renewed (ms), `ARGV[5]` = the caller's description (JSON, '' for none).
/// Returns `{1, token}` when acquired, `{0, pttl, last}` when held by
/// someone else (`pttl` = the holder's remaining ms, -1 if it has no
/// expiry; `last` = `max(the counter, the server's clock in µs)`, at least
/// every token issued so far: a hand-over to this caller announced with a
/// token up to `last` happened before this attempt and is void, since the
/// attempt did not find the lock its own). The bare counter would not do:
/// it can go back (see below), and a late announcement would then pass for
/// a new one; the clock, which bounds every token issued from below, does
/// not.
///
/// With nobody queued this is `SET key token NX PX ttl` (the peers' layout).
/// Otherwise the lock goes in arrival order: a release hands it straight to
/// the first waiter ([`RELEASE_QUEUED`]), so a releaser that comes back, or
/// any newcomer, queues behind the waiters instead of racing them. A caller
/// that finds the lock already holding its own token was handed it (or its
/// earlier attempt got it and the reply was lost): it is acquired again with
/// a fresh token and TTL, so an attempt can be repeated safely. A free lock
/// with someone else first in the queue (its holder expired) is handed to
/// that waiter.
///
/// The token is `max(counter + 1, the server's clock in microseconds)`, on
/// every acquisition. The counter alone can go back: a restart without
/// persistence forgets it, a reload of an RDB snapshot or of an AOF that
/// lost its last second of writes brings back an older value, a promoted
/// replica may be behind. The clock does not: every token is at least the
/// server's clock when it was issued, and can run ahead of the clock only
/// by the acquisitions that happen within one microsecond (none: a script
/// runs for several), so the first token after any such loss is above every
/// token issued before it, as long as the clock of the server issuing tokens
/// never steps back below the last token issued. Tokens stay below 2^53,
/// exact in Lua's doubles.
pub const ACQUIRE_FENCED: &str = concat!(
    include_str!("lua/acquire_fenced_1.lua"),
    next_fence!("KEYS[2]"),
    include_str!("lua/acquire_fenced_2.lua"),
    mutex_queue!(),
    include_str!("lua/acquire_fenced_3.lua"),
    mutex_wait!(),
    include_str!("lua/acquire_fenced_4.lua"),
);

/// `drop_lapsed!(line, lapse)`: Lua code dropping the lapsed places of the
/// Redlock line `line` (arrival) / `lapse` (lapse times), given `now` (see
/// `now_ms!` and [`ACQUIRE_IN_LINE`]).
macro_rules! drop_lapsed {
    ("KEYS[2]", "KEYS[3]") => {
        include_str!("lua/fragments/drop_lapsed_keys2.lua")
    };
}

/// `take_place!(line, lapse, id, arrival, lasts)`: Lua code taking (or
/// renewing) a place in the Redlock line `line` (lapse times `lapse`): wait
/// id `id`, arrival `arrival`, lasting `lasts` ms from `now`; see
/// [`ACQUIRE_IN_LINE`].
macro_rules! take_place {
    ("KEYS[2]", "KEYS[3]", "ARGV[3]", "ARGV[4]", "ARGV[5]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/take_place_keys2.lua"))
    };
    ("KEYS[3]", "KEYS[4]", "ARGV[3]", "ARGV[4]", "ARGV[5]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/take_place_keys3.lua"))
    };
}

/// `announce_turn!(channel, inbox)`: Lua code defining
/// `announce_turn(message, head)`: publishes the turn message `message` of
/// the waiter `head` (a wait id) in its client's inbox `inbox .. <client
/// id>` when the wait id names its client (`<client id hex>.<random>`) and
/// `inbox` is not empty, as `<release channel>\n<message>`, so that only
/// that client hears it; otherwise on the release channel `channel`, which
/// every client subscribed to the lock hears. Returns what `PUBLISH`
/// returned (`pcall`: a client whose ACL refuses the channel still
/// releases).
macro_rules! announce_turn {
    ("KEYS[2]", "ARGV[6]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/announce_turn_argv6.lua"))
    };
    ("KEYS[2]", "ARGV[3]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/announce_turn_argv3.lua"))
    };
}

/// `reserve_for_head!(key, line, lapse, seq)`: Lua code that hands a free
/// Redlock key to the first in line `line` (lapse times `lapse`) whose
/// place has not lapsed (needs `now`; lapsed places ahead of it are
/// dropped): the key `key` holds `line:<wait id>`, and the local `head`
/// (declared by the caller) is set to that wait id. With nobody in line
/// the key is deleted and `head` is nil.
///
/// When the wait id ends in `+<ttl ms>+<grace ms>` and more than the grace
/// is left of the waiter's place (it is still waiting), the reservation is
/// its lock once a quorum of nodes made it: it lasts the TTL the waiter
/// asked for, and so does its place from now on, so that a holder that
/// vanished holds the name up for one TTL, as one that took the key with a
/// round would. Otherwise (a place without a TTL, or one the waiter is
/// giving up) the reservation lasts as long as the place.
///
/// Each reservation gets the node's next turn sequence in the local
/// `turn_seq` (declared by the caller; needs `t` from `now_ms!`): `max(the
/// stored sequence + 1, the server's clock in µs + 1)`, kept in `seq` (see
/// [`LINE_SEQ`](super::layout::LINE_SEQ)), which the announcement carries.
/// A refused round is told `max(the stored sequence, the clock in µs)`
/// ([`ACQUIRE_IN_LINE`]), so a
/// reservation announced with a larger sequence was made after that round
/// ran, even if the stored sequence was lost (then the clock decides, as it
/// does for the fencing tokens). The stored sequence goes with the line:
/// it is deleted whenever the line is left empty, so that a name nobody
/// waits for leaves no key behind.
macro_rules! reserve_for_head {
    ("KEYS[1]", "KEYS[2]", "KEYS[3]", "KEYS[4]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/reserve_for_head_keys2.lua"))
    };
    ("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]") => {
        include_str!(concat!(env!("OUT_DIR"), "/lua/reserve_for_head_keys3.lua"))
    };
}

/// `leave_line!(id, holder, announce)`: Lua code by which the waiter `id`
/// leaves the Redlock line of [`RELEASE`]'s keys, the key holding `holder`;
/// defines `left` (whether it was in line). If it was its turn (first in
/// line while the key was free, or the key reserved for it), the turn
/// passes on: the key is reserved for the next in line, or freed if nobody
/// waits, and the next in line is told (`n - <wait id> <turn sequence>`,
/// with `announce_turn`) when `announce`.
macro_rules! leave_line {
    ("granted", "holder", "ARGV[2] ~= '0'") => {
        concat!(
            include_str!(concat!(env!("OUT_DIR"), "/lua/leave_line_granted_1.lua")),
            now_ms!(),
            reserve_for_head!("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]"),
            include_str!(concat!(env!("OUT_DIR"), "/lua/leave_line_granted_2.lua")),
        )
    };
    ("ARGV[1]", "holder", "ARGV[2] ~= '1'") => {
        concat!(
            include_str!(concat!(env!("OUT_DIR"), "/lua/leave_line_argv1_1.lua")),
            now_ms!(),
            reserve_for_head!("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]"),
            include_str!(concat!(env!("OUT_DIR"), "/lua/leave_line_argv1_2.lua")),
        )
    };
}

/// Redlock acquire on one node, in line (the waiters' arrival order, the
/// same on every node).
/// `KEYS[1]` = lock key, `KEYS[2]` = the line (`{key} line`: wait ids
/// scored by the waiter's arrival in µs of its own clock, so that every node
/// sorts the same waiters the same way), `KEYS[3]` = when each place lapses
/// (`{key} line lapse`: the same wait ids scored by this node's ms),
/// `KEYS[4]` = the turn sequence (`{key} line seq`, see
/// [`LINE_SEQ`](super::layout::LINE_SEQ));
/// `ARGV[1]` = owner token, `ARGV[2]` = ttl ms, `ARGV[3]` = the caller's wait
/// id ('' for a single try, which never takes a place), `ARGV[4]` = its
/// arrival score, `ARGV[5]` = how long its place lasts unless it tries again
/// (ms).
///
/// With nobody in line this is `SET key token NX PX ttl` (the peers'
/// layout). A release with someone in line does not free the key: it
/// reserves it for the first in line ([`RELEASE`]: the key holds
/// `line:<wait id>`), so a plain `SET NX` (a newcomer's first try, a peer
/// client) cannot take it; this script gives a reserved key to its waiter,
/// and a free key with a line only to the first in it. Anyone else, the
/// client that just released included, takes its place behind (a single
/// try just fails), so a release is the turn of the longest waiter on every
/// node. The key already holding our token (a repeated attempt whose first
/// reply was lost) counts as won. A reservation stays until it expires with
/// the place it was made for, even if that waiter left the line: a waiter
/// that a quorum of nodes reserved the key for holds the lock by those
/// reservations (its owner token is `line:<wait id>`) and keeps its place
/// until it releases.
/// Returns `{1}` when the key is ours, `{0, pttl, holder, seen}` otherwise:
/// `holder` is the owner token holding the key (`pttl` its remaining ms,
/// -1 without expiry), or `line:<wait id>` when the lock is the turn of
/// another waiter (`pttl` = until its place lapses, in ms); `seen` (a
/// decimal string) = `max(the node's turn sequence, its clock in µs)`: a
/// reservation for the caller announced with a larger sequence was made
/// after this refusal (see `reserve_for_head`).
pub const ACQUIRE_IN_LINE: &str = concat!(
    include_str!("lua/acquire_in_line_1.lua"),
    now_ms!(),
    include_str!("lua/acquire_in_line_2.lua"),
    take_place!("KEYS[2]", "KEYS[3]", "ARGV[3]", "ARGV[4]", "ARGV[5]"),
    include_str!("lua/acquire_in_line_3.lua"),
    drop_lapsed!("KEYS[2]", "KEYS[3]"),
    include_str!("lua/acquire_in_line_4.lua"),
    reserve_for_head!("KEYS[1]", "KEYS[2]", "KEYS[3]", "KEYS[4]"),
    include_str!("lua/acquire_in_line_5.lua"),
);

/// Compare-and-delete, then notify waiters (the release of `lock-redlock`).
/// `KEYS[1]` = lock key, `KEYS[2]` = release channel, `KEYS[3]` = the line,
/// `KEYS[4]` = its lapse times, `KEYS[5]` = the turn sequence (see
/// [`ACQUIRE_IN_LINE`]); `ARGV[1]` = owner
/// token, `ARGV[2]` = `0` to release without notifying (the clean-up of a
/// round that lost to a holder: the lock is not free, so waking the waiters
/// would only make them try in vain), anything else to notify; `ARGV[3]`,
/// `ARGV[4]`, `ARGV[5]` = the wait id, arrival and place duration of a
/// waiter whose failed round is cleaned up ('' for none): it gets back the
/// place its round's win here took, in the same step, so that it stays
/// first in line if it was; `ARGV[6]` = the prefix of the waiters' inbox
/// channels ('' to announce turns on the release channel); `ARGV[7]` = `1`
/// for an operator's force release: the owner token is whatever the key
/// holds (`ARGV[1]` is not compared; a key reserved for a waiter is that
/// waiter's, which loses its turn here as if it released), 0 if it holds
/// nothing.
/// With someone in line the key is reserved for the first in line (it holds
/// `line:<wait id>` until that place lapses) and the announcement is
/// `n <owner token> <wait id> <turn sequence>`, in that waiter's client's
/// inbox (see `announce_turn`), which wakes that waiter alone: the lock is
/// its turn. The sequence tells the waiter that the reservation was made
/// after its last round (see `reserve_for_head`): an announcement is no
/// proof by itself (it may arrive late, or be replayed).
/// With nobody in line the key is deleted and the announcement is the
/// owner token, on the release channel (it wakes one waiter of each
/// client).
/// A holder by reservation (owner token `line:<wait id>`, see
/// [`ACQUIRE_IN_LINE`]) kept its place in line while it held: its release
/// takes that place out first. Where the key is not its own, it leaves the
/// line as [`LEAVE_LINE`] does (a turn that was its own passes on, told
/// `n - <wait id>` unless `ARGV[2]` is `0`).
/// Returns 0 if the key did not hold our token, else 1 + the number of
/// clients the announcement reached (0 when not announced).
/// The notification is best effort (`pcall`): a user whose ACL does not
/// allow the channel still releases, and waiters re-check at the holder's TTL.
pub const RELEASE: &str = concat!(
    announce_turn!("KEYS[2]", "ARGV[6]"),
    include_str!("lua/release_1.lua"),
    leave_line!("granted", "holder", "ARGV[2] ~= '0'"),
    include_str!("lua/release_2.lua"),
    now_ms!(),
    include_str!("lua/release_3.lua"),
    take_place!("KEYS[3]", "KEYS[4]", "ARGV[3]", "ARGV[4]", "ARGV[5]"),
    include_str!("lua/release_4.lua"),
    reserve_for_head!("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]"),
    include_str!("lua/release_5.lua"),
);

/// A Redlock waiter leaves the line of one node (it got the lock elsewhere,
/// gave up, or failed). `KEYS` as for [`RELEASE`]; `ARGV[1]` = its wait id,
/// `ARGV[2]` = `1` if it leaves because it holds the lock (won on a quorum
/// of the other nodes), '' otherwise; `ARGV[3]` = the prefix of the
/// waiters' inbox channels (see [`RELEASE`]).
/// If it was its turn (first in line while the lock was free, or the key
/// reserved for it), the turn passes on: the key is reserved for the next
/// in line, or freed if nobody waits. The next in line is told
/// (`n - <wait id> <turn sequence>`) unless the leaver holds the lock: the lock is not free
/// then, and a waiter woken would only run a round in vain; the holder's
/// release wakes it. (This node's release can reach it after the new
/// holder's round did, which then lost here and leaves its place.)
/// Returns 1 if it was in line, else 0.
pub const LEAVE_LINE: &str = concat!(
    announce_turn!("KEYS[2]", "ARGV[3]"),
    include_str!("lua/leave_line_1.lua"),
    leave_line!("ARGV[1]", "holder", "ARGV[2] ~= '1'"),
    include_str!("lua/leave_line_2.lua"),
);

/// Mutex release: compare, then hand the lock to the first waiter in the
/// queue, or delete it if nobody waits.
/// `KEYS[1]` = lock key, `KEYS[2]` = fencing counter, `KEYS[3]` = queue,
/// `KEYS[4]` = lapse times, `KEYS[5]` = release channel, `KEYS[6]` = the
/// holder's description (deleted with the lock key, or the next holder's
/// on a hand-over); `ARGV[1]` = owner token, `ARGV[2]` = a queue member to remove first ('' for none: a waiter
/// that gives up passes its own, so that a lock handed to it meanwhile goes
/// on to the next waiter), `ARGV[3]` = `1` for an operator's force release
/// (the lock is released whoever holds it, `ARGV[1]` is not compared, and
/// the announcement names the evicted holder's token), '' otherwise.
///
/// The waiter gets the lock with its own token and TTL and a new fencing
/// token, and the release publishes `g <its owner token> <fencing token>
/// <its ttl ms>`, which wakes that waiter alone ([`crate::kit::notify`]) and
/// tells the others when to re-check at the latest. A release with nobody
/// waiting publishes the releasing owner token, as [`RELEASE`] does.
/// Returns 1 if the key held our token, else 0. Publishing is best effort
/// (`pcall`): a waiter that misses it finds the lock handed to it at its next
/// attempt.
pub const RELEASE_QUEUED: &str = concat!(
    include_str!("lua/release_queued_1.lua"),
    mutex_queue!(),
    include_str!("lua/release_queued_2.lua"),
);

/// Read-write lock acquire, atomically, phase-fair.
/// `KEYS[1]` = holders hash (`{key} rw`: owner token -> `r <expiry ms>` or
/// `w <expiry ms>`, in the server's clock), `KEYS[2]` = the waiting queue
/// (`{key} rw queue`: `r:<wait id>` or `w:<wait id>` scored by arrival ms,
/// strictly increasing: an arrival in the same millisecond as the last is
/// scored a hundredth of a millisecond after it),
/// `KEYS[3]` = fencing counter, `KEYS[4]` = when each waiter lapses
/// (`{key} rw lapse`: the same members scored by lapse ms); `ARGV[1]` =
/// owner token, `ARGV[2]` = ttl ms, `ARGV[3]` = `r` or `w`, `ARGV[4]` = the
/// wait id of a caller that will wait ('' for a single try), `ARGV[5]` =
/// how long its place lasts unless renewed (ms).
///
/// Expired holders and lapsed waiters are dropped first. A writer gets in
/// when nobody holds and nobody waits ahead of it; a reader when no writer
/// holds and no writer waits ahead of it (a single try arrives after every
/// waiter). So a stream of readers cannot starve a writer (they queue behind
/// it), and a writer that releases and comes back queues behind the readers
/// that waited for it. A caller that does not get in takes its place in the
/// queue (keeping its first arrival) or renews it; one that gets in leaves
/// it. Returns `{1, token}`, or `{0, ms}`: how long until a holder expires or
/// a waiter ahead lapses, whichever is longest.
pub const ACQUIRE_RW: &str = concat!(
    now_ms!(),
    include_str!("lua/acquire_rw_1.lua"),
    next_fence!("KEYS[3]"),
    include_str!("lua/acquire_rw_2.lua"),
);

/// Read-write lock release. `KEYS[1]` = holders hash, `KEYS[2]` = release
/// channel (`{key} rw released`); `ARGV[1]` = owner token. Returns 1 if the
/// token held the lock (not expired), else 0; publishes (best effort) when
/// it removed a holder.
pub const RELEASE_RW: &str = concat!(now_ms!(), include_str!("lua/release_rw.lua"),);

/// Write to read, in place. `KEYS[1]` = holders hash, `KEYS[2]` = release
/// channel, `KEYS[3]` = fencing counter; `ARGV[1]` = owner token, `ARGV[2]`
/// = ttl ms. Returns `{1, token}` (a new token from the counter) if the
/// token held the write side (not expired), now the read side; else `{0, 0}`.
/// Publishes, so that waiting readers come in (unless a writer waits).
pub const DOWNGRADE_RW: &str = concat!(
    now_ms!(),
    include_str!("lua/downgrade_rw_1.lua"),
    next_fence!("KEYS[3]"),
    include_str!("lua/downgrade_rw_2.lua"),
);

/// A waiter of the read-write lock gives up: `KEYS[1]` = the queue,
/// `KEYS[2]` = the lapse times, `KEYS[3]` = release channel; `ARGV[1]` = its
/// member (`r:<wait id>` or `w:<wait id>`). Leaves the queue and, if it was
/// there, publishes so that the waiters behind it re-check.
pub const WITHDRAW_WAITER: &str = include_str!("lua/withdraw_waiter.lua");

/// An operator's force release of a name's read-write lock and semaphore:
/// every holder of each is removed, whoever holds it, and each removal is
/// published on that primitive's release channel, as its release script
/// ([`RELEASE_RW`], [`RELEASE_PERMIT`]) does, so that the waiters wake as
/// they would for that many releases (the mutex's force release is
/// [`RELEASE_QUEUED`]'s). `KEYS[1]` = read-write holders, `KEYS[2]` = its
/// release channel, `KEYS[3]` = semaphore holders, `KEYS[4]` = its release
/// channel. Returns `{read-write holders removed, permits removed}`,
/// counting only holders that had not expired.
pub const FORCE_RELEASE_SHARED: &str =
    concat!(now_ms!(), include_str!("lua/force_release_shared.lua"),);

/// Semaphore acquire. `KEYS[1]` = holders (`{key} permits`: a sorted set of
/// owner tokens scored by expiry ms in the server's clock), `KEYS[2]` =
/// fencing counter; `ARGV[1]` = owner token, `ARGV[2]` = ttl ms, `ARGV[3]`
/// = permits. Expired holders are dropped first. Returns `{1, token}` when
/// fewer than `permits` hold, else `{0, ms until the first holder expires}`.
pub const ACQUIRE_PERMIT: &str = concat!(
    now_ms!(),
    include_str!("lua/acquire_permit_1.lua"),
    next_fence!("KEYS[2]"),
    include_str!("lua/acquire_permit_2.lua"),
);

/// Semaphore release. `KEYS[1]` = holders, `KEYS[2]` = release channel
/// (`{key} permits released`); `ARGV[1]` = owner token. Returns 1 if the
/// token held a permit (not expired), else 0; publishes (best effort) when
/// it removed one.
pub const RELEASE_PERMIT: &str = concat!(now_ms!(), include_str!("lua/release_permit.lua"),);

/// The election's term helpers, as Lua code defining `version()` (the
/// server's clock in µs, as text: the version of a change), `changed(m)`
/// (publishes `m` on the change channel `KEYS[8]`), `owns(v, owner)`
/// (whether the stored value `v` begins with `owner` and a space),
/// `new_term(owner, ttl, delay, value)` (the info key and the lock-delay
/// marker of a new term, announced as `leader ...`; returns its epoch, a
/// token from the fencing counter) and `hand_to(member)` (the term to that
/// queued candidate, announced to it as the mutex's hand-overs are); needs
/// `t`, `now` and the keys of [`ACQUIRE_LEADER`].
macro_rules! leader_term {
    () => {
        concat!(
            mutex_waiters!(),
            include_str!("lua/fragments/leader_term_1.lua"),
            next_fence!("KEYS[2]"),
            include_str!("lua/fragments/leader_term_2.lua"),
        )
    };
}

/// A candidate's attempt at a term of the election: the mutex's acquire
/// ([`ACQUIRE_FENCED`]) on the election's keys, with the value and the
/// lock-delay. `KEYS[1]` = `{N} leader` (the leader's owner token, with the
/// term's TTL), `KEYS[2]` = `{N} fencing` (the name's fencing counter: an
/// epoch is a fencing token), `KEYS[3]` = `{N} leader queue`, `KEYS[4]` =
/// `{N} leader lapse` (the candidates in line, as the mutex's queue;
/// members `<owner token> <ttl ms> {<lock-delay ms>} <value>`), `KEYS[5]` =
/// `{N} leader released` (the candidates' wake-ups, the mutex's messages),
/// `KEYS[6]` = `{N} leader info` (`<owner token> <epoch> <since ms>
/// <value>`, with the term's TTL), `KEYS[7]` = `{N} leader delay` (the
/// lock-delay marker: `<owner token> <lock-delay ms>`, lasting the term's
/// TTL plus its lock-delay), `KEYS[8]` = `{N} leader changed` (what
/// followers hear); `ARGV[1]` = owner token, `ARGV[2]` = ttl ms, `ARGV[3]`
/// = `1` to take a place in line if no term can start, `ARGV[4]` = how long
/// that place lasts (ms), `ARGV[5]` = lock-delay ms, `ARGV[6]` = the value.
/// A term starts when the leader key is free, no other term's lock-delay
/// marker is left, and nobody waits ahead; replies as [`ACQUIRE_FENCED`]
/// (`{1, epoch}` or `{0, pttl, last}`), where `pttl` is the marker's while
/// a lock-delay holds the election back, so that the first in line wakes
/// when it ends.
pub const ACQUIRE_LEADER: &str = concat!(
    include_str!("lua/acquire_leader_1.lua"),
    leader_term!(),
    include_str!("lua/acquire_leader_2.lua"),
    mutex_wait!(),
    include_str!("lua/acquire_leader_3.lua"),
);

/// The end of a term: the mutex's release ([`RELEASE_QUEUED`]) on the
/// election's keys. `KEYS` as for [`ACQUIRE_LEADER`]; `ARGV[1]` = owner
/// token, `ARGV[2]` = a queue member to remove first ('' for none),
/// `ARGV[3]` = `1` for a resignation (its lock-delay marker is deleted),
/// '' for the clean-up of a term that ended without one (the marker is
/// left to run out, and nobody is handed the term before it has). The
/// term goes to the first in line (announced as a new term), or the keys
/// are deleted and `none <version>` is announced. Returns 1 if the leader
/// key held the owner token, else 0 (nothing changed).
pub const RELEASE_LEADER: &str = concat!(
    include_str!("lua/release_leader_1.lua"),
    leader_term!(),
    include_str!("lua/release_leader_2.lua"),
);

/// A leader replaces its value: `KEYS[1]` = `{N} leader`, `KEYS[2]` = `{N}
/// leader info`, `KEYS[3]` = `{N} leader changed`; `ARGV[1]` = owner token,
/// `ARGV[2]` = the new value. Only while the leader key holds the owner
/// token (a later term has another token: a proclaim resent late never
/// writes into it); the info keeps its epoch and start, and the change is
/// announced (`leader ...`). Returns 1 if written, else 0.
pub const PROCLAIM: &str = include_str!("lua/proclaim.lua");

/// Who leads, read atomically: `KEYS[1]` = `{N} leader`, `KEYS[2]` = `{N}
/// leader info`. Returns `{version}` when nobody leads, else `{version,
/// epoch, since ms, pttl ms, value}`; `version` = the server's clock in µs
/// (a change announced with a larger version happened after this read).
pub const READ_LEADER: &str = include_str!("lua/read_leader.lua");

/// The scripts, ready for `EVALSHA`: [`Scripts::default`] for one
/// server, [`Scripts::cluster`] for a Redis Cluster.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// See [`ACQUIRE_FENCED`].
    pub acquire_fenced: Lua,
    /// See [`RELEASE`].
    pub release: Lua,
    /// See [`ACQUIRE_IN_LINE`].
    pub acquire_in_line: Lua,
    /// See [`LEAVE_LINE`].
    pub leave_line: Lua,
    /// See [`RELEASE_QUEUED`].
    pub release_queued: Lua,
    /// See [`LIST_PAGE`].
    pub list_page: Lua,
    /// See [`ACQUIRE_RW`].
    pub acquire_rw: Lua,
    /// See [`RELEASE_RW`].
    pub release_rw: Lua,
    /// See [`DOWNGRADE_RW`].
    pub downgrade_rw: Lua,
    /// See [`WITHDRAW_WAITER`].
    pub withdraw_waiter: Lua,
    /// See [`ACQUIRE_PERMIT`].
    pub acquire_permit: Lua,
    /// See [`RELEASE_PERMIT`].
    pub release_permit: Lua,
    /// See [`FORCE_RELEASE_SHARED`].
    pub force_release_shared: Lua,
    /// See [`ACQUIRE_LEADER`].
    pub acquire_leader: Lua,
    /// See [`RELEASE_LEADER`].
    pub release_leader: Lua,
    /// See [`PROCLAIM`].
    pub proclaim: Lua,
    /// See [`READ_LEADER`].
    pub read_leader: Lua,
    /// See [`RENEW_BATCH`].
    pub renew_batch: Lua,
    /// See [`RENEW_BATCH_ANY_SLOT`].
    pub renew_batch_any_slot: Lua,
}

impl Default for Scripts {
    /// The scripts as written, for one server (or Sentinel's primary).
    fn default() -> Self {
        Self::each(Lua::new)
    }
}

impl Scripts {
    /// The scripts for a Redis Cluster: every `PUBLISH` is a sharded
    /// `SPUBLISH` (each channel is a key of its lock's slot, so the
    /// message goes to the subscribers of that slot's owner, not over the
    /// whole cluster bus).
    pub fn cluster() -> Self {
        Self::each(|source| Lua::new(source.replace("'PUBLISH'", "'SPUBLISH'")))
    }

    /// The scripts a connection loads when it opens (the others are
    /// loaded by their first call, see [`super::call::ScriptCall`]).
    pub fn preloaded(&self) -> [&Lua; 4] {
        [
            &self.acquire_fenced,
            &self.release_queued,
            &self.renew_batch,
            &self.list_page,
        ]
    }

    /// Every script, from its source through `make`.
    fn each(make: impl Fn(&'static str) -> Lua) -> Self {
        Self {
            acquire_fenced: make(ACQUIRE_FENCED),
            release: make(RELEASE),
            acquire_in_line: make(ACQUIRE_IN_LINE),
            leave_line: make(LEAVE_LINE),
            release_queued: make(RELEASE_QUEUED),
            list_page: make(LIST_PAGE),
            acquire_rw: make(ACQUIRE_RW),
            release_rw: make(RELEASE_RW),
            downgrade_rw: make(DOWNGRADE_RW),
            withdraw_waiter: make(WITHDRAW_WAITER),
            acquire_permit: make(ACQUIRE_PERMIT),
            release_permit: make(RELEASE_PERMIT),
            force_release_shared: make(FORCE_RELEASE_SHARED),
            acquire_leader: make(ACQUIRE_LEADER),
            release_leader: make(RELEASE_LEADER),
            proclaim: make(PROCLAIM),
            read_leader: make(READ_LEADER),
            renew_batch: make(RENEW_BATCH),
            renew_batch_any_slot: make(RENEW_BATCH_ANY_SLOT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script's sources, one server's and a cluster's, side by side.
    fn pairs() -> Vec<(String, String)> {
        let (one, cluster) = (Scripts::default(), Scripts::cluster());
        let sources = |s: &Scripts| -> Vec<String> {
            [
                &s.acquire_fenced,
                &s.release,
                &s.acquire_in_line,
                &s.leave_line,
                &s.release_queued,
                &s.list_page,
                &s.acquire_rw,
                &s.release_rw,
                &s.downgrade_rw,
                &s.withdraw_waiter,
                &s.acquire_permit,
                &s.release_permit,
                &s.force_release_shared,
                &s.acquire_leader,
                &s.release_leader,
                &s.proclaim,
                &s.read_leader,
                &s.renew_batch,
                &s.renew_batch_any_slot,
            ]
            .iter()
            .map(|l| l.source().to_string())
            .collect()
        };
        sources(&one).into_iter().zip(sources(&cluster)).collect()
    }

    #[test]
    fn a_clusters_scripts_publish_sharded_and_are_otherwise_the_same() {
        let mut published = 0;
        for (one, cluster) in pairs() {
            assert!(!cluster.contains("'PUBLISH'"), "{cluster}");
            let n = one.matches("'PUBLISH'").count();
            assert_eq!(cluster.matches("'SPUBLISH'").count(), n);
            assert_eq!(cluster.replace("'SPUBLISH'", "'PUBLISH'"), one);
            assert!(!one.contains("SPUBLISH"));
            published += n;
        }
        assert!(published >= 15, "{published} PUBLISH calls found");
    }
}

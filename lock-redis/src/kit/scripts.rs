//! The Lua scripts and key layout shared by `lock-redis` and `lock-redlock`.
//!
//! Layout (compatible with redis-py `Lock`, redsync, node-redlock, rslock):
//! the lock key is the lock name (with an optional prefix) holding a random
//! owner token; acquisition is `SET key token NX PX ttl`; release and extend
//! compare the token first. `lock-redis` adds a fencing counter
//! `{key} fencing` (same cluster slot through the hash tag) that never
//! expires, and publishes on `{key} released` when it releases, so that
//! waiters wake at once instead of polling.
//!
//! The mutex's holder describes itself in `{key} holder`: its owner token,
//! a space and the holder's description as JSON (`lock_core::Holder`),
//! with the lock key's expiry; every script that sets, hands over, extends
//! or deletes the lock key does the same to it, so a description is shown
//! only while its token holds the lock key (peers never touch it).
//!
//! Every auxiliary key is the lock key in braces, a space and a suffix. Lock
//! names and key prefixes cannot contain whitespace, so no lock key is ever
//! an auxiliary key of another lock: the lock named `{x}:fencing` is just a
//! lock, never the counter of the lock `x`.
//!
//! [`error_kind`] is the shared mapping of `redis` errors to error kinds.
//!
//! Scripts are sent with `EVALSHA` (the `redis` crate's `Script` loads a
//! script once, on the first `NOSCRIPT` reply).

use std::fmt;

use lock_core::LockErrorKind;
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

/// The server's clock in ms, as Lua code defining `now` (shared by the
/// read-write and permit scripts, which keep each holder's expiry in it).
macro_rules! now_ms {
    () => {
        "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// The next fencing token from the counter `KEYS[n]` (see [`ACQUIRE_FENCED`]),
/// as Lua code defining `fence`; needs `t` from `now_ms!`.
macro_rules! next_fence {
    ($key:literal) => {
        concat!(
            "local fence = (tonumber(redis.call('GET', ",
            $key,
            ")) or 0) + 1\n",
            "local us = tonumber(t[1]) * 1000000 + tonumber(t[2])\n",
            "if us > fence then fence = us end\n",
            "redis.call('SET', ",
            $key,
            ", string.format('%.0f', fence))\n"
        )
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
            "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
            "local function next_waiter()\n",
            "  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do\n",
            "    redis.call('ZREM', KEYS[3], m)\n",
            "    redis.call('ZREM', KEYS[4], m)\n",
            "  end\n",
            "  while true do\n",
            "    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n",
            "    if first == nil then return nil end\n",
            "    if string.match(first, '^%x+ %d+$') or string.match(first, '^%x+ %d+ {') then return first end\n",
            "    redis.call('ZREM', KEYS[3], first)\n",
            "    redis.call('ZREM', KEYS[4], first)\n",
            "  end\n",
            "end\n",
            "local function hand_to(m)\n",
            "  local owner, ttl, desc = string.match(m, '^(%x+) (%d+) ?(.*)$')\n",
            "  redis.call('SET', KEYS[1], owner, 'PX', ttl)\n",
            "  if desc ~= '' then\n",
            "    redis.call('SET', KEYS[6], owner .. ' ' .. desc, 'PX', ttl)\n",
            "  else\n",
            "    redis.call('DEL', KEYS[6])\n",
            "  end\n",
            "  redis.call('ZREM', KEYS[3], m)\n",
            "  redis.call('ZREM', KEYS[4], m)\n",
            next_fence!("KEYS[2]"),
            "  redis.pcall('PUBLISH', KEYS[5], 'g ' .. owner .. ' ' .. string.format('%.0f', fence) .. ' ' .. ttl)\n",
            "end\n"
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
    r#"
local t
local function fenced()
  if ARGV[5] ~= '' then
    redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[5], 'PX', ARGV[2])
  else
    redis.call('DEL', KEYS[6])
  end
  t = redis.call('TIME')
"#,
    next_fence!("KEYS[2]"),
    r#"  return fence
end
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fenced()}
end
local me = ARGV[1] .. ' ' .. ARGV[2]
if ARGV[5] ~= '' then me = me .. ' ' .. ARGV[5] end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
  return {1, fenced()}
end
t = redis.call('TIME')
"#,
    mutex_queue!(),
    r#"
if not holder then
  local head = next_waiter()
  if head == nil or head == me then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[3], me)
    redis.call('ZREM', KEYS[4], me)
    return {1, fenced()}
  end
  hand_to(head)
end
if ARGV[3] == '1' then
  local lasts = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[3], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), me)
  redis.call('ZADD', KEYS[4], now + lasts, me)
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
  end
end
local last = math.max(tonumber(redis.call('GET', KEYS[2])) or 0, tonumber(t[1]) * 1000000 + tonumber(t[2]))
return {0, redis.call('PTTL', KEYS[1]), last}
"#
);

/// Lua code dropping the lapsed places of the Redlock line `KEYS[n]`
/// (arrival) / `KEYS[m]` (lapse times), given `now` (see [`now_ms!`] and
/// [`ACQUIRE_IN_LINE`]).
macro_rules! drop_lapsed {
    ($line:literal, $lapse:literal) => {
        concat!(
            "for _, m in ipairs(redis.call('ZRANGEBYSCORE', ",
            $lapse,
            ", '-inf', now)) do\n",
            "  redis.call('ZREM', ",
            $line,
            ", m)\n",
            "  redis.call('ZREM', ",
            $lapse,
            ", m)\n",
            "end\n"
        )
    };
}

/// Lua code taking (or renewing) a place in the Redlock line `$line`
/// (lapse times `$lapse`): wait id `$id`, arrival `$arrival`, lasting
/// `$lasts` ms from `now`; see [`ACQUIRE_IN_LINE`].
macro_rules! take_place {
    ($line:literal, $lapse:literal, $id:literal, $arrival:literal, $lasts:literal) => {
        concat!(
            "local lasts = tonumber(",
            $lasts,
            ")\n",
            "redis.call('ZADD', ",
            $line,
            ", 'NX', ",
            $arrival,
            ", ",
            $id,
            ")\n",
            "redis.call('ZADD', ",
            $lapse,
            ", now + lasts, ",
            $id,
            ")\n",
            "for _, k in ipairs({",
            $line,
            ", ",
            $lapse,
            "}) do\n",
            "  if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end\n",
            "end\n"
        )
    };
}

/// The value of a Redlock key reserved for the first in line: `line:` and
/// its wait id (see [`ACQUIRE_IN_LINE`]). It is also that waiter's owner
/// token when it holds the lock by the reservation alone (a quorum of
/// nodes reserved the key for it), so it contains no space.
pub const RESERVED_FOR: &str = "line:";

/// Lua code defining `announce_turn(message, head)`: publishes the turn
/// message `message` of the waiter `head` (a wait id) in its client's inbox
/// `$inbox .. <client id>` when the wait id names its client
/// (`<client id hex>.<random>`) and `$inbox` is not empty, as
/// `<release channel>\n<message>`, so that only that client hears it;
/// otherwise on the release channel `$channel`, which every client
/// subscribed to the lock hears. Returns what `PUBLISH` returned (`pcall`:
/// a client whose ACL refuses the channel still releases).
macro_rules! announce_turn {
    ($channel:literal, $inbox:literal) => {
        concat!(
            "local function announce_turn(message, head)\n",
            "  local inbox = ",
            $inbox,
            " or ''\n",
            "  local client = inbox ~= '' and string.match(head, '^(%x+)%.')\n",
            "  if client then\n",
            "    return redis.pcall('PUBLISH', inbox .. client, ",
            $channel,
            " .. '\\n' .. message)\n",
            "  end\n",
            "  return redis.pcall('PUBLISH', ",
            $channel,
            ", message)\n",
            "end\n"
        )
    };
}

/// Lua code that hands a free Redlock key to the first in line `$line`
/// whose place has not lapsed (needs `now`; lapsed places ahead of it are
/// dropped): the key `$key` holds `line:<wait id>`, and the local `head`
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
/// stored sequence + 1, the server's clock in µs + 1)`, kept in `$seq` (see
/// [`LINE_SEQ`]), which the announcement carries. A refused round is told
/// `max(the stored sequence, the clock in µs)` ([`ACQUIRE_IN_LINE`]), so a
/// reservation announced with a larger sequence was made after that round
/// ran, even if the stored sequence was lost (then the clock decides, as it
/// does for the fencing tokens). The stored sequence goes with the line:
/// it is deleted whenever the line is left empty, so that a name nobody
/// waits for leaves no key behind.
macro_rules! reserve_for_head {
    ($key:literal, $line:literal, $lapse:literal, $seq:literal) => {
        concat!(
            "head = nil\n",
            "local lapse\n",
            "while true do\n",
            "  local first = redis.call('ZRANGE', ",
            $line,
            ", 0, 0)[1]\n",
            "  if not first then break end\n",
            "  lapse = tonumber(redis.call('ZSCORE', ",
            $lapse,
            ", first))\n",
            "  if lapse and lapse > now then head = first break end\n",
            "  redis.call('ZREM', ",
            $line,
            ", first)\n",
            "  redis.call('ZREM', ",
            $lapse,
            ", first)\n",
            "end\n",
            "if head then\n",
            "  local hold = lapse - now\n",
            "  local ttl, grace = string.match(head, '%+(%d+)%+(%d+)$')\n",
            "  if ttl and hold > tonumber(grace) then\n",
            "    hold = tonumber(ttl)\n",
            "    redis.call('ZADD', ",
            $lapse,
            ", now + hold, head)\n",
            "  end\n",
            "  redis.call('SET', ",
            $key,
            ", 'line:' .. head, 'PX', math.max(hold, 1))\n",
            "  turn_seq = math.max((tonumber(redis.call('GET', ",
            $seq,
            ")) or 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1)\n",
            "  redis.call('SET', ",
            $seq,
            ", string.format('%.0f', turn_seq), 'PX', math.max(hold, redis.call('PTTL', ",
            $line,
            "), 1))\n",
            "else\n",
            "  redis.call('DEL', ",
            $key,
            ", ",
            $seq,
            ")\n",
            "end\n"
        )
    };
}

/// Lua code by which the waiter `$id` leaves the Redlock line of
/// [`RELEASE`]'s keys, the key holding `$holder`; defines `left` (whether
/// it was in line). If it was its turn (first in line while the key was
/// free, or the key reserved for it), the turn passes on: the key is
/// reserved for the next in line, or freed if nobody waits, and the next in
/// line is told (`n - <wait id> <turn sequence>`, with `announce_turn`)
/// when `$announce`.
macro_rules! leave_line {
    ($id:literal, $holder:literal, $announce:literal) => {
        concat!(
            "local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n",
            "redis.call('ZREM', KEYS[4], ",
            $id,
            ")\n",
            "local left = redis.call('ZREM', KEYS[3], ",
            $id,
            ") == 1\n",
            "if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('DEL', KEYS[5]) end\n",
            "if left and (",
            $holder,
            " == 'line:' .. ",
            $id,
            " or (first == ",
            $id,
            " and not ",
            $holder,
            ")) then\n",
            "local head, turn_seq\n",
            now_ms!(),
            reserve_for_head!("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]"),
            "if head and ",
            $announce,
            " then announce_turn('n - ' .. head .. ' ' .. string.format('%.0f', turn_seq), head) end\n",
            "end\n"
        )
    };
}

/// Redlock acquire on one node, in line (the waiters' arrival order, the
/// same on every node).
/// `KEYS[1]` = lock key, `KEYS[2]` = the line (`{key} line`: wait ids
/// scored by the waiter's arrival in µs of its own clock, so that every node
/// sorts the same waiters the same way), `KEYS[3]` = when each place lapses
/// (`{key} line lapse`: the same wait ids scored by this node's ms),
/// `KEYS[4]` = the turn sequence (`{key} line seq`, see [`LINE_SEQ`]);
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
    r#"
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
local holder = redis.call('GET', KEYS[1])
local function leave()
  if ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[2], ARGV[3])
    redis.call('ZREM', KEYS[3], ARGV[3])
    if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('DEL', KEYS[4]) end
  end
end
if holder == ARGV[1] then
  leave()
  return {1}
end
"#,
    now_ms!(),
    r#"
local function seen()
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%.0f', math.max(tonumber(redis.call('GET', KEYS[4])) or 0, us))
end
local function join()
  if ARGV[3] == '' then return end
"#,
    take_place!("KEYS[2]", "KEYS[3]", "ARGV[3]", "ARGV[4]", "ARGV[5]"),
    r#"end
if holder and ARGV[3] ~= '' and holder == 'line:' .. ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  leave()
  return {1}
end
if not holder then
  -- Lapsed places matter only when the lock goes to the first in line.
"#,
    drop_lapsed!("KEYS[2]", "KEYS[3]"),
    r#"
  -- First in line: ahead of the current head by arrival (a waiter whose
  -- place here was taken by its own last round comes back to it).
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local head, mine = first[1], tonumber(ARGV[4])
  if head == nil or head == ARGV[3] or (ARGV[3] ~= '' and
      (mine < tonumber(first[2]) or (mine == tonumber(first[2]) and ARGV[3] < head))) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    leave()
    return {1}
  end
  join()
  local turn_seq
"#,
    reserve_for_head!("KEYS[1]", "KEYS[2]", "KEYS[3]", "KEYS[4]"),
    r#"
  return {0, redis.call('PTTL', KEYS[1]), 'line:' .. head, seen()}
end
join()
return {0, redis.call('PTTL', KEYS[1]), holder, seen()}
"#
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
    r#"
local holder = redis.call('GET', KEYS[1])
local owner = ARGV[1]
if ARGV[7] == '1' then
  if not holder then return 0 end
  owner = holder
end
local granted = string.sub(owner, 1, 5) == 'line:' and string.sub(owner, 6)
local head, turn_seq
if holder ~= owner then
  if granted then
"#,
    leave_line!("granted", "holder", "ARGV[2] ~= '0'"),
    r#"
  end
  return 0
end
if granted then
  redis.call('ZREM', KEYS[3], granted)
  redis.call('ZREM', KEYS[4], granted)
end
if not granted and ARGV[3] == '' and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
else
"#,
    now_ms!(),
    r#"
  if ARGV[3] ~= '' then
"#,
    take_place!("KEYS[3]", "KEYS[4]", "ARGV[3]", "ARGV[4]", "ARGV[5]"),
    r#"  end
"#,
    reserve_for_head!("KEYS[1]", "KEYS[3]", "KEYS[4]", "KEYS[5]"),
    r#"end
if ARGV[2] == '0' then return 1 end
local heard
if head then
  heard = announce_turn('n ' .. owner .. ' ' .. head .. ' ' .. string.format('%.0f', turn_seq), head)
else
  heard = redis.pcall('PUBLISH', KEYS[2], owner)
end
if type(heard) == 'number' then return 1 + heard end
return 1
"#
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
    "local holder = redis.call('GET', KEYS[1])\n",
    leave_line!("ARGV[1]", "holder", "ARGV[2] ~= '1'"),
    "if left then return 1 end\nreturn 0\n"
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
    r#"
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
end
local holder = redis.call('GET', KEYS[1])
if not holder or (ARGV[3] ~= '1' and holder ~= ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[6])
  redis.pcall('PUBLISH', KEYS[5], holder)
  return 1
end
local t = redis.call('TIME')
"#,
    mutex_queue!(),
    r#"
local head = next_waiter()
if head == nil then
  redis.call('DEL', KEYS[1], KEYS[6])
  redis.pcall('PUBLISH', KEYS[5], holder)
else
  hand_to(head)
end
return 1
"#
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
    r#"
local readers, writer, longest = 0, false, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local kind, exp = string.sub(all[i + 1], 1, 1), tonumber(string.sub(all[i + 1], 3))
  if exp == nil or exp <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    if kind == 'w' then writer = true else readers = readers + 1 end
    if exp - now > longest then longest = exp - now end
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZREM', KEYS[4], m)
end
local me = ''
local arrival = false
if ARGV[4] ~= '' then
  me = ARGV[3] .. ':' .. ARGV[4]
  arrival = redis.call('ZSCORE', KEYS[2], me)
end
local ahead
if arrival then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. arrival)
else
  ahead = redis.call('ZRANGE', KEYS[2], 0, -1)
end
local writer_ahead = false
for _, m in ipairs(ahead) do
  if string.sub(m, 1, 1) == 'w' then writer_ahead = true end
end
local ok
if ARGV[3] == 'w' then
  ok = (not writer) and readers == 0 and #ahead == 0
else
  ok = (not writer) and not writer_ahead
end
if ok then
  if me ~= '' then
    redis.call('ZREM', KEYS[2], me)
    redis.call('ZREM', KEYS[4], me)
  end
"#,
    next_fence!("KEYS[3]"),
    r#"  local ttl = tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ' ' .. string.format('%.0f', now + ttl))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  return {1, fence}
end
for _, m in ipairs(ahead) do
  local lapse = tonumber(redis.call('ZSCORE', KEYS[4], m))
  if lapse and lapse - now > longest then longest = lapse - now end
end
if me ~= '' then
  local lasts = tonumber(ARGV[5])
  if not arrival then
    -- Arrivals are strictly ordered: one in the same millisecond as the
    -- last comes a hundredth of a millisecond after it, so that no waiter
    -- counts one that arrived before it as level with it.
    local at = now
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) >= at then at = tonumber(last[2]) + 0.01 end
    redis.call('ZADD', KEYS[2], 'NX', at, me)
  end
  redis.call('ZADD', KEYS[4], now + lasts, me)
  for _, k in ipairs({KEYS[2], KEYS[4]}) do
    if redis.call('PTTL', k) < lasts then redis.call('PEXPIRE', k, lasts) end
  end
end
return {0, longest}
"#
);

/// Read-write lock release. `KEYS[1]` = holders hash, `KEYS[2]` = release
/// channel (`{key} rw released`); `ARGV[1]` = owner token. Returns 1 if the
/// token held the lock (not expired), else 0; publishes (best effort) when
/// it removed a holder.
pub const RELEASE_RW: &str = concat!(
    now_ms!(),
    r#"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
if tonumber(string.sub(v, 3)) <= now then return 0 end
return 1
"#
);

/// Write to read, in place. `KEYS[1]` = holders hash, `KEYS[2]` = release
/// channel, `KEYS[3]` = fencing counter; `ARGV[1]` = owner token, `ARGV[2]`
/// = ttl ms. Returns `{1, token}` (a new token from the counter) if the
/// token held the write side (not expired), now the read side; else `{0, 0}`.
/// Publishes, so that waiting readers come in (unless a writer waits).
pub const DOWNGRADE_RW: &str = concat!(
    now_ms!(),
    r#"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'w' or tonumber(string.sub(v, 3)) <= now then
  return {0, 0}
end
"#,
    next_fence!("KEYS[3]"),
    r#"local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], 'r ' .. string.format('%.0f', now + ttl))
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
return {1, fence}
"#
);

/// A waiter of the read-write lock gives up: `KEYS[1]` = the queue,
/// `KEYS[2]` = the lapse times, `KEYS[3]` = release channel; `ARGV[1]` = its
/// member (`r:<wait id>` or `w:<wait id>`). Leaves the queue and, if it was
/// there, publishes so that the waiters behind it re-check.
pub const WITHDRAW_WAITER: &str = r#"
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.pcall('PUBLISH', KEYS[3], ARGV[1])
  return 1
end
return 0
"#;

/// An operator's force release of a name's read-write lock and semaphore:
/// every holder of each is removed, whoever holds it, and each removal is
/// published on that primitive's release channel, as its release script
/// ([`RELEASE_RW`], [`RELEASE_PERMIT`]) does, so that the waiters wake as
/// they would for that many releases (the mutex's force release is
/// [`RELEASE_QUEUED`]'s). `KEYS[1]` = read-write holders, `KEYS[2]` = its
/// release channel, `KEYS[3]` = semaphore holders, `KEYS[4]` = its release
/// channel. Returns `{read-write holders removed, permits removed}`,
/// counting only holders that had not expired.
pub const FORCE_RELEASE_SHARED: &str = concat!(
    now_ms!(),
    r#"
local rw = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.sub(all[i + 1], 3))
  redis.call('HDEL', KEYS[1], all[i])
  if exp and exp > now then
    rw = rw + 1
    redis.pcall('PUBLISH', KEYS[2], all[i])
  end
end
local permits = 0
local held = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  redis.call('ZREM', KEYS[3], held[i])
  if tonumber(held[i + 1]) > now then
    permits = permits + 1
    redis.pcall('PUBLISH', KEYS[4], held[i])
  end
end
return {rw, permits}
"#
);

/// Semaphore acquire. `KEYS[1]` = holders (`{key} permits`: a sorted set of
/// owner tokens scored by expiry ms in the server's clock), `KEYS[2]` =
/// fencing counter; `ARGV[1]` = owner token, `ARGV[2]` = ttl ms, `ARGV[3]`
/// = permits. Expired holders are dropped first. Returns `{1, token}` when
/// fewer than `permits` hold, else `{0, ms until the first holder expires}`.
pub const ACQUIRE_PERMIT: &str = concat!(
    now_ms!(),
    r#"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
"#,
    next_fence!("KEYS[2]"),
    r#"local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {1, fence}
"#
);

/// Semaphore release. `KEYS[1]` = holders, `KEYS[2]` = release channel
/// (`{key} permits released`); `ARGV[1]` = owner token. Returns 1 if the
/// token held a permit (not expired), else 0; publishes (best effort) when
/// it removed one.
pub const RELEASE_PERMIT: &str = concat!(
    now_ms!(),
    r#"
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', KEYS[2], ARGV[1])
if tonumber(exp) <= now then return 0 end
return 1
"#
);

/// One page of `list`: `SCAN` from `ARGV[1]` with `MATCH ARGV[2]` and
/// `COUNT ARGV[3]`, keeping the keys that hold a lock: a string of 32 hex
/// digits (the owner token of this crate, of redis-py and most peers) or a
/// Redlock key reserved for a waiter ([`RESERVED_FOR`]), with an expiry.
/// Returns `{next cursor, key1, token1, pttl1, key2, ...}`.
pub const LIST_PAGE: &str = r#"
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = {page[1]}
for _, k in ipairs(page[2]) do
  if redis.call('TYPE', k).ok == 'string' then
    local v = redis.call('GET', k)
    if (#v == 32 and not string.find(v, '[^0-9a-fA-F]')) or string.sub(v, 1, 5) == 'line:' then
      local ttl = redis.call('PTTL', k)
      if ttl > 0 then
        table.insert(out, k)
        table.insert(out, v)
        table.insert(out, ttl)
      end
    end
  end
end
return out
"#;

/// `prefix` as a `SCAN MATCH` pattern for every key that starts with it.
pub fn match_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// A lock key found by [`LIST_PAGE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The key (the prefix and the lock name).
    pub key: String,
    /// The holder's owner token.
    pub token: String,
    /// Its remaining TTL in ms.
    pub pttl: u64,
}

/// Every lock key whose name starts with `name_prefix` under `key_prefix`,
/// page by page with [`LIST_PAGE`] through `conn` (one request per page).
pub async fn list_keys<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    script: &Script,
    key_prefix: &str,
    name_prefix: &str,
) -> redis::RedisResult<Vec<Listed>> {
    let pattern = match_prefix(&format!("{key_prefix}{name_prefix}"));
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    loop {
        let page: Vec<redis::Value> = crate::kit::call::ScriptCall::new(script, &[])
            .arg(&cursor)
            .arg(&pattern)
            .arg(1000)
            .invoke_async(conn)
            .await?;
        let mut items = page.into_iter();
        cursor = match items.next() {
            Some(v) => redis::from_redis_value(v)?,
            None => "0".to_string(),
        };
        while let (Some(k), Some(t), Some(p)) = (items.next(), items.next(), items.next()) {
            found.push(Listed {
                key: redis::from_redis_value(k)?,
                token: redis::from_redis_value(t)?,
                pttl: redis::from_redis_value(p)?,
            });
        }
        if cursor == "0" {
            return Ok(found);
        }
    }
}

/// The scripts, ready for `EVALSHA`.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// See [`ACQUIRE_FENCED`].
    pub acquire_fenced: Script,
    /// See [`RELEASE`].
    pub release: Script,
    /// See [`ACQUIRE_IN_LINE`].
    pub acquire_in_line: Script,
    /// See [`LEAVE_LINE`].
    pub leave_line: Script,
    /// See [`RELEASE_QUEUED`].
    pub release_queued: Script,
    /// See [`LIST_PAGE`].
    pub list_page: Script,
    /// See [`ACQUIRE_RW`].
    pub acquire_rw: Script,
    /// See [`RELEASE_RW`].
    pub release_rw: Script,
    /// See [`DOWNGRADE_RW`].
    pub downgrade_rw: Script,
    /// See [`WITHDRAW_WAITER`].
    pub withdraw_waiter: Script,
    /// See [`ACQUIRE_PERMIT`].
    pub acquire_permit: Script,
    /// See [`RELEASE_PERMIT`].
    pub release_permit: Script,
    /// See [`FORCE_RELEASE_SHARED`].
    pub force_release_shared: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            release: Script::new(RELEASE),
            acquire_in_line: Script::new(ACQUIRE_IN_LINE),
            leave_line: Script::new(LEAVE_LINE),
            release_queued: Script::new(RELEASE_QUEUED),
            list_page: Script::new(LIST_PAGE),
            acquire_rw: Script::new(ACQUIRE_RW),
            release_rw: Script::new(RELEASE_RW),
            downgrade_rw: Script::new(DOWNGRADE_RW),
            withdraw_waiter: Script::new(WITHDRAW_WAITER),
            acquire_permit: Script::new(ACQUIRE_PERMIT),
            release_permit: Script::new(RELEASE_PERMIT),
            force_release_shared: Script::new(FORCE_RELEASE_SHARED),
        }
    }
}

/// The Redis keys of one lock name, written one after another into one
/// string (every acquisition and release makes them: one allocation, not
/// twelve) and read through the methods below.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    /// The lock key, then each auxiliary key of [`AUX_SUFFIXES`].
    text: String,
    /// Where each key ends in `text`: the lock key's end, then each
    /// auxiliary key's.
    ends: [usize; AUX_SUFFIXES.len() + 1],
}

/// The auxiliary keys' suffixes, in the order of [`Keys`]'s methods.
const AUX_SUFFIXES: [&str; 11] = [
    "fencing",
    RELEASED,
    "queue",
    "lapse",
    RW,
    "rw queue",
    "rw lapse",
    "rw released",
    PERMITS,
    "permits released",
    HOLDER,
];

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("lock", &self.lock())
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// The key at `index` (0: the lock key; then [`AUX_SUFFIXES`]'s).
    fn nth(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start..self.ends[index]]
    }

    /// The lock key itself: `prefix + name`.
    pub fn lock(&self) -> &str {
        self.nth(0)
    }

    /// The fencing counter: `{prefix + name} fencing` (never expires).
    pub fn fencing(&self) -> &str {
        self.nth(1)
    }

    /// The pub/sub channel a release publishes on: `{prefix + name} released`.
    pub fn released(&self) -> &str {
        self.nth(2)
    }

    /// The mutex's waiters by arrival: `{prefix + name} queue`.
    pub fn queue(&self) -> &str {
        self.nth(3)
    }

    /// The mutex's waiters by lapse time: `{prefix + name} lapse`.
    pub fn lapse(&self) -> &str {
        self.nth(4)
    }

    /// The read-write lock's holders: `{prefix + name} rw`.
    pub fn rw(&self) -> &str {
        self.nth(5)
    }

    /// The read-write lock's waiters by arrival: `{prefix + name} rw queue`.
    pub fn rw_queue(&self) -> &str {
        self.nth(6)
    }

    /// The read-write lock's waiters by lapse time: `{prefix + name} rw lapse`.
    pub fn rw_lapse(&self) -> &str {
        self.nth(7)
    }

    /// The read-write lock's release channel: `{prefix + name} rw released`.
    pub fn rw_released(&self) -> &str {
        self.nth(8)
    }

    /// The semaphore's holders: `{prefix + name} permits`.
    pub fn permits(&self) -> &str {
        self.nth(9)
    }

    /// The semaphore's release channel: `{prefix + name} permits released`.
    pub fn permits_released(&self) -> &str {
        self.nth(10)
    }

    /// The mutex holder's description: `{prefix + name} holder`, holding
    /// `<owner token> <description JSON>` with the lock key's expiry.
    pub fn holder(&self) -> &str {
        self.nth(11)
    }
}

/// The suffix of the mutex's release channel ([`Keys::released`]).
pub const RELEASED: &str = "released";
/// The suffix of a Redlock lock's line of waiters (see [`ACQUIRE_IN_LINE`]).
pub const LINE: &str = "line";
/// The suffix of the lapse times of a Redlock lock's line.
pub const LINE_LAPSE: &str = "line lapse";
/// The suffix of a Redlock lock's turn sequence on one node: the sequence
/// of the node's latest reservation for the first in line (it expires with
/// the line; the server's clock stands in for it when it is gone).
pub const LINE_SEQ: &str = "line seq";
/// The suffix of the mutex holder's description ([`Keys::holder`]).
pub const HOLDER: &str = "holder";
/// The suffix of the read-write lock's holders key ([`Keys::rw`]).
pub const RW: &str = "rw";
/// The suffix of the semaphore's holders key ([`Keys::permits`]).
pub const PERMITS: &str = "permits";

impl Keys {
    /// The keys of lock `name` under `prefix` (empty for none). `prefix`
    /// must pass [`check_prefix`] (the configurations check it).
    pub fn new(prefix: &str, name: &str) -> Self {
        Self::build(&[prefix, name])
    }

    /// The keys that go with the lock key `lock` (`prefix + name`).
    pub fn of_lock(lock: &str) -> Self {
        Self::build(&[lock])
    }

    /// The keys of the lock key made of `parts`.
    fn build(parts: &[&str]) -> Self {
        let lock_len: usize = parts.iter().map(|p| p.len()).sum();
        let aux_len: usize = AUX_SUFFIXES.iter().map(|s| lock_len + s.len() + 3).sum();
        let mut text = String::with_capacity(lock_len + aux_len);
        parts.iter().for_each(|part| text.push_str(part));
        let mut ends = [0; AUX_SUFFIXES.len() + 1];
        ends[0] = lock_len;
        for (i, suffix) in AUX_SUFFIXES.iter().enumerate() {
            text.push('{');
            text.extend_from_within(..lock_len);
            text.push_str("} ");
            text.push_str(suffix);
            ends[i + 1] = text.len();
        }
        Self { text, ends }
    }

    /// The auxiliary key `suffix` of the lock key `lock`: `{lock} suffix`.
    pub fn aux(lock: &str, suffix: &str) -> String {
        let mut key = String::with_capacity(lock.len() + suffix.len() + 3);
        key.push('{');
        key.push_str(lock);
        key.push_str("} ");
        key.push_str(suffix);
        key
    }
}

/// Checks a key prefix: no whitespace or control characters, so that no
/// lock key can be an auxiliary key (see the module docs).
pub fn check_prefix(prefix: &str) -> lock_core::Result<()> {
    match prefix
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        Some(c) => Err(lock_core::LockError::invalid(format!(
            "key prefix {prefix:?} contains {c:?}; whitespace and control characters are not allowed"
        ))),
        None => Ok(()),
    }
}

/// The error kind of a `redis` error, shared by `lock-redis` and
/// `lock-redlock` (each wraps it into its own messages).
pub fn error_kind(err: &RedisError) -> LockErrorKind {
    let code = err.code().unwrap_or("");
    match err.kind() {
        ErrorKind::Io => LockErrorKind::Unavailable,
        _ if err.is_timeout() || err.is_connection_dropped() || err.is_connection_refusal() => {
            LockErrorKind::Unavailable
        }
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            LockErrorKind::Unauthorized
        }
        _ if matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM") => LockErrorKind::Unauthorized,
        ErrorKind::InvalidClientConfig => LockErrorKind::InvalidArgument,
        // The server is up but cannot serve writes now: loading its data set,
        // a failover in progress, a busy script, out of memory, failing to persist.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::ReadOnly,
        ) => LockErrorKind::Unavailable,
        _ if matches!(code, "BUSY" | "OOM" | "MISCONF" | "LOADING") => LockErrorKind::Unavailable,
        ErrorKind::Client => LockErrorKind::Internal,
        // Parse errors, unexpected reply types, MOVED/ASK/CROSSSLOT from a
        // cluster (not supported: use one node), script errors.
        _ => LockErrorKind::Protocol,
    }
}

/// A random owner token: 128 bits from the OS-seeded thread RNG, as 32 hex digits.
pub fn owner_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_slot_tag() {
        let k = Keys::new("", "jobs/report");
        assert_eq!(k.lock(), "jobs/report");
        assert_eq!(k.fencing(), "{jobs/report} fencing");
        assert_eq!(k.released(), "{jobs/report} released");
        assert_eq!(Keys::new("app:", "x").lock(), "app:x");
        // A name shaped like another lock's counter is just a lock.
        let tricky = Keys::new("", "{x}:fencing");
        assert_ne!(tricky.lock(), Keys::new("", "x").fencing());
        assert!(check_prefix("locks:").is_ok());
        assert!(check_prefix("a b").is_err());
        assert_eq!(match_prefix("jobs/[a]*"), "jobs/\\[a\\]\\**");
    }

    #[test]
    fn every_auxiliary_key_is_the_lock_key_in_braces_and_its_suffix() {
        let k = Keys::new("app:", "jobs/é x");
        assert_eq!(k.lock(), "app:jobs/é x");
        let aux = [
            k.fencing(),
            k.released(),
            k.queue(),
            k.lapse(),
            k.rw(),
            k.rw_queue(),
            k.rw_lapse(),
            k.rw_released(),
            k.permits(),
            k.permits_released(),
            k.holder(),
        ];
        for (key, suffix) in aux.into_iter().zip(AUX_SUFFIXES) {
            assert_eq!(key, Keys::aux("app:jobs/é x", suffix));
        }
        assert_eq!(k.rw_released(), "{app:jobs/é x} rw released");
        assert_eq!(Keys::of_lock("app:jobs/é x"), k);
        assert_eq!(Keys::new("", "").fencing(), "{} fencing");
    }

    #[test]
    fn owner_tokens_are_128_bit_and_distinct() {
        let (a, b) = (owner_token(), owner_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}

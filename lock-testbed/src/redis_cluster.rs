//! Redis Cluster: three primaries and one replica of each on loopback, made
//! into a cluster with `CLUSTER` commands (no `redis-cli`), with slot
//! migration step by step and failover.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::member::{member_index, member_index_mut};
use crate::process::log_tails;
use crate::redis::{info_field, info_text, RedisOptions, RedisServer};
use crate::resp::{expect_ok, RespValue};
use crate::util::poll_until;
use crate::TestbedError;

/// Hash slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;
/// Primaries at start (nodes 0, 1, 2).
const PRIMARIES: usize = 3;
/// Nodes: each primary `p` has one replica, node `p + 3`.
const NODES: usize = 2 * PRIMARIES;
/// The slots of primaries 0, 1, 2, as `redis-cli --cluster create` splits them.
const SLOT_RANGES: [(u16, u16); PRIMARIES] = [(0, 5460), (5461, 10922), (10923, 16383)];
/// How long the whole cluster may take to start.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one node may take to answer PING after spawn.
const PROCESS_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the nodes' views may take to agree after a change (a restart,
/// the end of a slot migration).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`RedisClusterSet::owner_of_slot`] waits for the nodes to agree.
const AGREE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the waits probe.
const POLL: Duration = Duration::from_millis(50);
/// Keys per `CLUSTER GETKEYSINSLOT` + `MIGRATE` batch.
const MIGRATE_BATCH: usize = 100;
/// `MIGRATE`'s own timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";

/// How to run a [`RedisClusterSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterOptions {
    /// `--cluster-node-timeout`: how long a node may be unreachable before
    /// the others fail it and its replica takes over. Default 1 s.
    pub node_timeout: Duration,
    /// Every node also listens with TLS ([`RedisOptions::tls`], mutual
    /// TLS with the test process's certificates), replicates and runs the
    /// cluster bus over TLS; clients use [`RedisClusterSet::tls_url`].
    /// The plain ports stay open for the set's own commands. Default off.
    pub tls: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            node_timeout: Duration::from_millis(1000),
            tls: false,
        }
    }
}

/// The hash slot of `key` (CRC16/XMODEM mod 16384), as Redis Cluster
/// computes it: only the part between the first `{` and the first `}` after
/// it counts, if that part is not empty.
fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % CLUSTER_SLOTS
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Slot ranges (inclusive) and the node ID of their owner, sorted.
type Owners = Vec<(u16, u16, String)>;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    flags: Vec<String>,
    /// The primary's ID of a replica.
    primary: Option<String>,
    /// The slot ranges it owns (inclusive); not the `[slot->-id]` marks of a
    /// migration.
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn failed(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// The lines of a `CLUSTER NODES` reply.
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let id = parts.next()?.to_string();
            let _addr = parts.next()?;
            let flags = parts.next()?.split(',').map(str::to_string).collect();
            let primary = Some(parts.next()?)
                .filter(|m| *m != "-")
                .map(str::to_string);
            let slots = parts
                .skip(4) // ping-sent, pong-recv, config-epoch, link-state
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => {
                        let slot = s.parse().ok()?;
                        Some((slot, slot))
                    }
                })
                .collect();
            Some(NodeLine {
                id,
                flags,
                primary,
                slots,
            })
        })
        .collect()
}

/// A Redis Cluster on loopback: six `redis-server --cluster-enabled yes`
/// nodes in their own temp dirs, each with its cluster bus on a free port of
/// its own. Nodes 0, 1 and 2 start as the primaries, with the slots split as
/// `redis-cli --cluster create` splits them (0-5460, 5461-10922,
/// 10923-16383); node `p + 3` starts as the replica of node `p`. The cluster
/// is made with `CLUSTER ADDSLOTSRANGE`, `CLUSTER SET-CONFIG-EPOCH`,
/// `CLUSTER MEET` and `CLUSTER REPLICATE`.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_testbed::{RedisClusterSet, RespValue};
///
/// let mut cluster = RedisClusterSet::start()?;
/// let slot = RedisClusterSet::slot_of("my-lock");
/// let owner = cluster.owner_of_slot(slot)?;
/// cluster.node(owner).cmd(&["SET", "my-lock", "v"])?;
/// cluster.kill_node(owner)?;
/// let promoted = cluster.wait_for_failover(owner, Duration::from_secs(20))?;
/// assert_eq!(cluster.owner_of_slot(slot)?, promoted);
/// # Ok::<(), lock_testbed::TestbedError>(())
/// ```
///
/// Dropping it SIGKILLs every node and removes their temp dirs.
#[derive(Debug)]
pub struct RedisClusterSet {
    nodes: Vec<RedisServer>,
    /// The cluster node IDs (kept across restarts, in `nodes.conf`).
    ids: Vec<String>,
    opts: ClusterOptions,
    /// The slots each node owned when [`RedisClusterSet::kill_node`] killed it.
    killed_slots: Vec<Vec<(u16, u16)>>,
}

impl RedisClusterSet {
    /// Start a cluster of three primaries and three replicas with the default
    /// options ([`ClusterOptions::default`]): see [`start_with`](Self::start_with).
    pub fn start() -> Result<RedisClusterSet, TestbedError> {
        RedisClusterSet::start_with(ClusterOptions::default())
    }

    /// Start six cluster nodes with `opts`, make them one cluster, and wait
    /// (at most 20 s) until every node says `cluster_state:ok` and
    /// `cluster_known_nodes:6`, every replica's link to its primary is up and
    /// every node's `CLUSTER NODES` shows the same slot owners and three
    /// replicas.
    pub fn start_with(opts: ClusterOptions) -> Result<RedisClusterSet, TestbedError> {
        let started = Instant::now();
        let deadline = started + READY_TIMEOUT;
        let node_opts = RedisOptions {
            cluster_node_timeout: Some(opts.node_timeout),
            tls: opts.tls,
            tls_replication: opts.tls,
            tls_cluster: opts.tls,
            ..RedisOptions::default()
        };
        let mut launched = Vec::with_capacity(NODES);
        for _ in 0..NODES {
            launched.push(RedisServer::launch(node_opts)?);
        }
        let mut nodes = Vec::with_capacity(NODES);
        for mut node in launched {
            if let Err(e) = node.wait_ready(Instant::now() + PROCESS_READY_TIMEOUT) {
                if !node.port_was_taken() {
                    return Err(e);
                }
                node = RedisServer::start_with(node_opts)?;
            }
            nodes.push(node);
        }
        let mut ids = Vec::with_capacity(NODES);
        for node in &nodes {
            let reply = node.cmd(&["CLUSTER", "MYID"])?;
            let id = reply.as_str().ok_or_else(|| {
                TestbedError::protocol(
                    format!("CLUSTER MYID on {}", node.addr()),
                    format!("{reply:?}"),
                )
            })?;
            ids.push(id.to_string());
        }
        let set = RedisClusterSet {
            nodes,
            ids,
            opts,
            killed_slots: vec![Vec::new(); NODES],
        };
        set.create(deadline)
            .map_err(|detail| set.not_ready(started, detail))?;
        Ok(set)
    }

    /// Slots, epochs, meetings, replicas; then wait for the views to settle.
    fn create(&self, deadline: Instant) -> Result<(), String> {
        let run = |i: usize, args: &[&str]| -> Result<(), String> {
            let node = &self.nodes[i];
            let reply = node.cmd(args).map_err(|e| e.to_string())?;
            expect_ok(node.addr(), args, reply).map_err(|e| e.to_string())
        };
        for (p, (first, last)) in SLOT_RANGES.iter().enumerate() {
            run(
                p,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )?;
        }
        for i in 0..NODES {
            run(i, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        for i in 1..NODES {
            let node = &self.nodes[i];
            let bus = node
                .cluster_bus_port()
                .ok_or_else(|| format!("node {i} has no cluster bus port"))?
                .to_string();
            let port = node.addr().port().to_string();
            run(0, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus])?;
        }
        // A replica can follow a primary only once it knows it.
        poll_until(deadline, POLL, || {
            for p in 0..PRIMARIES {
                let r = p + PRIMARIES;
                let args = ["CLUSTER", "REPLICATE", self.ids[p].as_str()];
                match self.nodes[r].cmd(&args) {
                    Ok(RespValue::Simple(ok)) if ok == "OK" => {}
                    Ok(other) => return Err(format!("node {r}: {}: {other:?}", args.join(" "))),
                    Err(e) => return Err(format!("node {r}: {e}")),
                }
            }
            Ok(())
        })?;
        poll_until(deadline, POLL, || self.settled())
    }

    fn what(&self) -> String {
        format!(
            "redis cluster of {} nodes on {:?}",
            self.nodes.len(),
            self.nodes.iter().map(RedisServer::addr).collect::<Vec<_>>()
        )
    }

    fn logs(&self, lines: usize) -> String {
        let paths: Vec<_> = self
            .nodes
            .iter()
            .filter_map(|n| n.dir().map(|d| d.join("redis.log")))
            .collect();
        log_tails(&paths, lines)
    }

    fn not_ready(&self, started: Instant, detail: String) -> TestbedError {
        TestbedError::NotReady {
            what: self.what(),
            waited: started.elapsed(),
            detail,
            log_tail: self.logs(10),
        }
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> ClusterOptions {
        self.opts
    }

    /// The six nodes, in node order (0, 1, 2 started as primaries; `p + 3`
    /// as the replica of `p`).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// Panics if `i >= 6`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Node `i`, for faults that need `&mut` ([`RedisServer::kill`]; prefer
    /// [`kill_node`](Self::kill_node), which remembers the node's slots for
    /// [`wait_for_failover`](Self::wait_for_failover)).
    ///
    /// # Panics
    ///
    /// Panics if `i >= 6`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Node `i`'s cluster node ID (the same after a restart).
    ///
    /// # Panics
    ///
    /// Panics if `i >= 6`, like slice indexing.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The addresses of the nodes started as primaries (nodes 0, 1, 2), the
    /// seeds of [`url`](Self::url). After a failover the primaries are
    /// others: see [`current_primaries`](Self::current_primaries).
    pub fn primaries(&self) -> Vec<SocketAddr> {
        self.nodes[..PRIMARIES]
            .iter()
            .map(RedisServer::addr)
            .collect()
    }

    /// `redis+cluster://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`: the nodes
    /// started as primaries, as seeds (a client learns the rest from them).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.primaries().iter().map(|a| a.to_string()).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// `rediss+cluster://127.0.0.1:a,...`: the TLS ports of the nodes
    /// started as primaries, with [`ClusterOptions::tls`]; `None` without.
    pub fn tls_url(&self) -> Option<String> {
        let hosts = self.nodes[..PRIMARIES]
            .iter()
            .map(|n| n.tls_addr().map(|a| a.to_string()))
            .collect::<Option<Vec<String>>>()?;
        Some(format!("rediss+cluster://{}", hosts.join(",")))
    }

    /// The hash slot of `key` (CRC16/XMODEM mod 16384), with Redis Cluster's
    /// hash tags: if the key holds a `{` and a later `}` with something in
    /// between, only that something is hashed (`{user1}.a` and `{user1}.b`
    /// share a slot); `CLUSTER KEYSLOT` agrees.
    pub fn slot_of(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    /// The node whose cluster node ID is `id`.
    fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|i| i == id)
    }

    /// The running nodes.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].pid().is_some())
    }

    /// Node `i`'s `CLUSTER NODES`.
    fn view(&self, i: usize) -> Result<Vec<NodeLine>, String> {
        let reply = self.nodes[i]
            .cmd(&["CLUSTER", "NODES"])
            .map_err(|e| format!("node {i}: CLUSTER NODES: {e}"))?;
        let text = reply
            .as_str()
            .ok_or_else(|| format!("node {i}: CLUSTER NODES answered {reply:?}"))?;
        Ok(parse_nodes(text))
    }

    /// Node `i`'s `CLUSTER INFO` field `name`.
    fn cluster_info(&self, i: usize, name: &str) -> Result<String, String> {
        let node = &self.nodes[i];
        let reply = node
            .cmd(&["CLUSTER", "INFO"])
            .map_err(|e| format!("node {i}: CLUSTER INFO: {e}"))?;
        let text = info_text(node.addr(), "cluster", &reply).map_err(|e| e.to_string())?;
        info_field(&text, name)
            .map(str::to_string)
            .ok_or_else(|| format!("node {i}: no {name} in CLUSTER INFO"))
    }

    /// Slot ranges and the IDs of their owners, in one node's view.
    fn owners(view: &[NodeLine]) -> Owners {
        let mut owners: Owners = view
            .iter()
            .filter(|l| l.has_flag("master"))
            .flat_map(|l| l.slots.iter().map(|&(a, b)| (a, b, l.id.clone())))
            .collect();
        owners.sort();
        owners
    }

    /// `Ok` once every running node says `cluster_state:ok` and knows every
    /// node, all their views agree on the slot owners, flag no running node
    /// as failing and show every running node that owns no slot as a
    /// replica, and every replica's link to its primary is up.
    fn settled(&self) -> Result<(), String> {
        let mut agreed: Option<(usize, Owners)> = None;
        for i in self.running() {
            let state = self.cluster_info(i, "cluster_state")?;
            if state != "ok" {
                return Err(format!("node {i}: cluster_state:{state}"));
            }
            let known = self.cluster_info(i, "cluster_known_nodes")?;
            if known != NODES.to_string() {
                return Err(format!("node {i}: cluster_known_nodes:{known}"));
            }
            let view = self.view(i)?;
            for line in &view {
                let Some(j) = self.index_of_id(&line.id) else {
                    return Err(format!("node {i} knows a stranger: {line:?}"));
                };
                if self.nodes[j].pid().is_none() {
                    continue;
                }
                if line.failed() || line.has_flag("handshake") {
                    return Err(format!("node {i} flags node {j}: {:?}", line.flags));
                }
                if line.slots.is_empty() && (!line.has_flag("slave") || line.primary.is_none()) {
                    return Err(format!(
                        "node {i} sees node {j} as {:?} with no slots",
                        line.flags
                    ));
                }
            }
            let owners = Self::owners(&view);
            match &agreed {
                None => agreed = Some((i, owners)),
                Some((first, theirs)) if *theirs != owners => {
                    return Err(format!(
                        "nodes {first} and {i} disagree on the slot owners: {theirs:?} / {owners:?}"
                    ))
                }
                Some(_) => {}
            }
            if view
                .iter()
                .any(|l| l.has_flag("myself") && l.has_flag("slave"))
            {
                let info = self.nodes[i]
                    .replication_info()
                    .map_err(|e| format!("node {i}: {e}"))?;
                let link = info_field(&info, "master_link_status").unwrap_or("?");
                if link != "up" {
                    return Err(format!("replica node {i}: master_link_status:{link}"));
                }
            }
        }
        Ok(())
    }

    /// The indices of the nodes that own slots now, in node order, as the
    /// running nodes agree (an error if they do not within 5 s).
    pub fn current_primaries(&self) -> Result<Vec<usize>, TestbedError> {
        self.agreed_owners().map(|owners| {
            let mut primaries: Vec<usize> = owners.into_values().collect();
            primaries.sort_unstable();
            primaries.dedup();
            primaries
        })
    }

    /// Slot range starts and their owners' indices, as every running node
    /// sees them (waits up to 5 s for agreement).
    fn agreed_owners(&self) -> Result<BTreeMap<(u16, u16), usize>, TestbedError> {
        poll_until(Instant::now() + AGREE_TIMEOUT, POLL, || {
            let mut agreed: Option<Owners> = None;
            for i in self.running() {
                let owners = Self::owners(&self.view(i)?);
                match &agreed {
                    None => agreed = Some(owners),
                    Some(theirs) if *theirs != owners => {
                        return Err(format!("the nodes disagree: {theirs:?} / {owners:?}"))
                    }
                    Some(_) => {}
                }
            }
            let owners = agreed.ok_or_else(|| "no node is running".to_string())?;
            owners
                .into_iter()
                .map(|(a, b, id)| {
                    self.index_of_id(&id)
                        .map(|i| ((a, b), i))
                        .ok_or_else(|| format!("slots {a}-{b} belong to a stranger, {id}"))
                })
                .collect()
        })
        .map_err(|detail| {
            TestbedError::protocol(format!("the slot owners of {}", self.what()), detail)
        })
    }

    /// The index of the node that owns `slot` now, as every running node
    /// sees it (a slot being migrated is still its source's until
    /// [`finish_migration`](Self::finish_migration)); waits up to 5 s for
    /// the views to agree. A node killed but not yet failed over still owns
    /// its slots.
    pub fn owner_of_slot(&self, slot: u16) -> Result<usize, TestbedError> {
        self.agreed_owners()?
            .into_iter()
            .find(|&((a, b), _)| a <= slot && slot <= b)
            .map(|(_, i)| i)
            .ok_or_else(|| {
                TestbedError::protocol(format!("the owner of slot {slot}"), "no node owns it")
            })
    }

    fn check_slot(slot: u16) -> Result<(), TestbedError> {
        if slot < CLUSTER_SLOTS {
            Ok(())
        } else {
            Err(TestbedError::protocol(
                format!("slot {slot}"),
                "a cluster has slots 0 to 16383",
            ))
        }
    }

    /// Runs `args` on node `i`, expecting `+OK`.
    fn run_ok(&self, i: usize, args: &[&str]) -> Result<(), TestbedError> {
        let node = member_index(&self.nodes, i)?;
        expect_ok(node.addr(), args, node.cmd(args)?)
    }

    /// The first step of moving `slot` from primary `from` to primary `to`:
    /// `CLUSTER SETSLOT <slot> IMPORTING <from's id>` on `to`, then `CLUSTER
    /// SETSLOT <slot> MIGRATING <to's id>` on `from`. From now on `from`
    /// answers `-ASK <slot> <to>` for keys of the slot it no longer holds, and
    /// `to` serves them to a client that sends `ASKING` first.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), TestbedError> {
        Self::check_slot(slot)?;
        member_index(&self.nodes, from)?;
        member_index(&self.nodes, to)?;
        let owner = self.owner_of_slot(slot)?;
        if owner != from || from == to {
            return Err(TestbedError::protocol(
                format!("begin_migration({slot}, {from}, {to})"),
                format!("slot {slot} belongs to node {owner}"),
            ));
        }
        let slot_arg = slot.to_string();
        self.run_ok(
            to,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot_arg,
                "IMPORTING",
                &self.ids[from],
            ],
        )?;
        self.run_ok(
            from,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &self.ids[to]],
        )
    }

    /// The second step: move every key of `slot` from `from` to `to`, in
    /// batches of 100 (`CLUSTER GETKEYSINSLOT` then `MIGRATE ... KEYS`);
    /// returns how many keys moved.
    pub fn move_keys(&self, slot: u16, from: usize, to: usize) -> Result<usize, TestbedError> {
        Self::check_slot(slot)?;
        let source = member_index(&self.nodes, from)?;
        let target = member_index(&self.nodes, to)?;
        let (slot_arg, batch) = (slot.to_string(), MIGRATE_BATCH.to_string());
        let port = target.addr().port().to_string();
        let mut moved = 0;
        loop {
            let reply = source.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch])?;
            let keys: Vec<String> = match &reply {
                RespValue::Array(Some(keys)) => keys
                    .iter()
                    .map(|k| k.as_str().map(str::to_string))
                    .collect::<Option<_>>(),
                _ => None,
            }
            .ok_or_else(|| {
                TestbedError::protocol(
                    format!("CLUSTER GETKEYSINSLOT {slot} on {}", source.addr()),
                    format!("{reply:?}"),
                )
            })?;
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut args = vec![
                "MIGRATE",
                "127.0.0.1",
                &port,
                "",
                "0",
                MIGRATE_TIMEOUT_MS,
                "KEYS",
            ];
            args.extend(keys.iter().map(String::as_str));
            match source.cmd(&args)? {
                RespValue::Simple(s) if s == "OK" || s == "NOKEY" => moved += keys.len(),
                other => {
                    return Err(TestbedError::protocol(
                        format!(
                            "MIGRATE of slot {slot} from {} to {}",
                            source.addr(),
                            target.addr()
                        ),
                        format!("{other:?}"),
                    ))
                }
            }
        }
    }

    /// The last step: `CLUSTER SETSLOT <slot> NODE <to's id>` on `to`, then
    /// on every other running primary (the source refuses while it still
    /// holds keys of the slot: [`move_keys`](Self::move_keys) first); returns
    /// once every running node says `to` owns the slot. Clients then get
    /// `-MOVED` from the source.
    pub fn finish_migration(&self, slot: u16, to: usize) -> Result<(), TestbedError> {
        Self::check_slot(slot)?;
        member_index(&self.nodes, to)?;
        let slot_arg = slot.to_string();
        let args = [
            "CLUSTER",
            "SETSLOT",
            slot_arg.as_str(),
            "NODE",
            &self.ids[to],
        ];
        self.run_ok(to, &args)?;
        for i in self.running().filter(|&i| i != to) {
            let master = self
                .view(i)
                .map_err(|e| TestbedError::protocol("finish_migration", e))?
                .iter()
                .any(|l| l.has_flag("myself") && l.has_flag("master"));
            if master {
                self.run_ok(i, &args)?;
            }
        }
        poll_until(Instant::now() + SETTLE_TIMEOUT, POLL, || {
            match self.owner_of_slot(slot) {
                Ok(owner) if owner == to => Ok(()),
                Ok(owner) => Err(format!("slot {slot} still belongs to node {owner}")),
                Err(e) => Err(e.to_string()),
            }
        })
        .map_err(|detail| TestbedError::protocol(format!("finish_migration({slot}, {to})"), detail))
    }

    /// Move `slot` and its keys from primary `from` to primary `to`:
    /// [`begin_migration`](Self::begin_migration),
    /// [`move_keys`](Self::move_keys), [`finish_migration`](Self::finish_migration).
    /// Returns how many keys moved.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) -> Result<usize, TestbedError> {
        self.begin_migration(slot, from, to)?;
        let moved = self.move_keys(slot, from, to)?;
        self.finish_migration(slot, to)?;
        Ok(moved)
    }

    /// SIGKILL node `i` by PID, after noting the slots it owns (for
    /// [`wait_for_failover`](Self::wait_for_failover)). Killing a primary
    /// makes its replica take over after the node timeout.
    pub fn kill_node(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.nodes, i)?;
        let slots = match self.view(i) {
            Ok(view) => view
                .iter()
                .find(|l| l.has_flag("myself"))
                .map(|l| l.slots.clone())
                .unwrap_or_default(),
            Err(_) => {
                let id = &self.ids[i];
                self.running()
                    .filter(|&j| j != i)
                    .find_map(|j| self.view(j).ok())
                    .and_then(|view| view.into_iter().find(|l| &l.id == id))
                    .map(|l| l.slots)
                    .unwrap_or_default()
            }
        };
        self.killed_slots[i] = slots;
        member_index_mut(&mut self.nodes, i)?.kill()
    }

    /// Wait until the slots that `killed` owned when
    /// [`kill_node`](Self::kill_node) killed it belong to another node that
    /// says it is a master (its replica, promoted), in the views of every
    /// running node, and every running node says `cluster_state:ok` again;
    /// return the new owner's index. An error if that has not happened
    /// `within`, or if `killed` owned no slots (a replica: no failover).
    pub fn wait_for_failover(
        &self,
        killed: usize,
        within: Duration,
    ) -> Result<usize, TestbedError> {
        member_index(&self.nodes, killed)?;
        // Killed by `kill_node`, or else still the owner in a live view
        // (killed through `node_mut`, not failed over yet).
        let owned = self.killed_slots[killed].first().copied().or_else(|| {
            let id = &self.ids[killed];
            self.running()
                .filter_map(|i| self.view(i).ok())
                .find_map(|view| {
                    view.into_iter()
                        .find(|l| &l.id == id)
                        .and_then(|l| l.slots.first().copied())
                })
        });
        let Some((slot, _)) = owned else {
            return Err(TestbedError::protocol(
                format!("wait_for_failover({killed})"),
                "the node owned no slots when it was killed (kill_node): nothing to take over",
            ));
        };
        poll_until(Instant::now() + within, POLL, || {
            let mut owner = None;
            for i in self.running() {
                let state = self.cluster_info(i, "cluster_state")?;
                if state != "ok" {
                    return Err(format!("node {i}: cluster_state:{state}"));
                }
                let view = self.view(i)?;
                let line = view
                    .iter()
                    .find(|l| l.has_flag("master") && l.owns(slot))
                    .ok_or_else(|| format!("node {i} sees no owner of slot {slot}"))?;
                let j = self
                    .index_of_id(&line.id)
                    .ok_or_else(|| format!("a stranger owns slot {slot}"))?;
                if j == killed {
                    return Err(format!("node {i} still says node {killed} owns slot {slot}"));
                }
                if owner.is_some_and(|o| o != j) {
                    return Err(format!("the nodes disagree on the owner of slot {slot}"));
                }
                owner = Some(j);
            }
            let j = owner.ok_or_else(|| "no node is running".to_string())?;
            match self.nodes[j].cmd(&["ROLE"]) {
                Ok(RespValue::Array(Some(role)))
                    if role.first().and_then(RespValue::as_str) == Some("master") =>
                {
                    Ok(j)
                }
                other => Err(format!("node {j} answers ROLE with {other:?}")),
            }
        })
        .map_err(|detail| TestbedError::NoLeader {
            what: self.what(),
            detail: format!(
                "no failover from node {killed} within {within:?}: {detail}\n--- last lines of the logs ---\n{}",
                self.logs(10)
            ),
        })
    }

    /// Start killed node `i` again on its port, bus port and dir: its
    /// `nodes.conf` brings it back into the cluster under its ID (a primary
    /// whose slots went to its replica comes back as that node's replica,
    /// empty: no persistence). Returns once the cluster has settled: every
    /// running node says `cluster_state:ok`, no view flags a running node
    /// as failing, the views agree on the slot owners, and every replica's
    /// link is up (at most 20 s). A running node is killed first.
    pub fn restart_node(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index_mut(&mut self.nodes, i)?.restart()?;
        self.killed_slots[i].clear();
        let started = Instant::now();
        poll_until(started + SETTLE_TIMEOUT, POLL, || self.settled())
            .map_err(|detail| self.not_ready(started, detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        // Examples from the Redis Cluster specification.
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"123456789"), 0x31C3 % CLUSTER_SLOTS);
    }

    #[test]
    fn parses_cluster_nodes() {
        let text = "07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected\n\
                    e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-292f]\n\
                    292f 127.0.0.1:30002@31002 master,fail - 0 0 2 disconnected\n";
        let lines = parse_nodes(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].primary.as_deref(), Some("e7d1"));
        assert!(lines[0].slots.is_empty());
        assert_eq!(lines[1].slots, vec![(0, 5460), (7000, 7000)]);
        assert!(lines[1].owns(7000) && !lines[1].owns(5461));
        assert!(lines[2].failed());
        assert!(!lines[1].failed());
    }
}

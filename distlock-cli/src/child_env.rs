//! The environment `distlock run` gives CMD about the locks it holds, and
//! `distlock elect` about the term it leads.

use distlock::{Leadership, MultiGuard, Scheme};

/// The lock names, space-separated, in acquisition order (names never hold whitespace).
pub const LOCK_NAME: &str = "DISTLOCK_LOCK_NAME";
/// The fencing token of each grant, space-separated, in the same order.
pub const TOKEN: &str = "DISTLOCK_TOKEN";
/// Where each lock lives on the server (key or node), space-separated, in the same order.
pub const LOCK_KEY: &str = "DISTLOCK_LOCK_KEY";
/// etcd, one name: the lock's key, as `etcdctl lock NAME CMD` gives it.
pub const ETCD_LOCK_KEY: &str = "ETCD_LOCK_KEY";
/// etcd, one name: the key's create revision (the fencing token), as `etcdctl lock` gives it.
pub const ETCD_LOCK_REV: &str = "ETCD_LOCK_REV";

/// `elect`: the election's name.
pub const ELECTION: &str = "DISTLOCK_ELECTION";
/// `elect`: the epoch of the term (its fencing token).
pub const EPOCH: &str = "DISTLOCK_EPOCH";
/// `elect`: the value this leader published.
pub const LEADER_VALUE: &str = "DISTLOCK_LEADER_VALUE";

/// The variables `distlock elect` gives CMD while it leads: the election,
/// the epoch (removed when the backend has none), the published value,
/// and where the term lives on the server; `distlock run`'s variables are
/// removed, so that CMD never sees values inherited from elsewhere.
pub fn election_env(term: &Leadership) -> Vec<(&'static str, Option<String>)> {
    let guard = term.view();
    vec![
        (ELECTION, Some(term.name().to_string())),
        (EPOCH, term.epoch().map(|e| e.to_string())),
        (LEADER_VALUE, Some(term.value())),
        (LOCK_KEY, guard.server_key().map(str::to_string)),
        (LOCK_NAME, None),
        (TOKEN, None),
        (ETCD_LOCK_KEY, None),
        (ETCD_LOCK_REV, None),
    ]
}

/// Every variable to set (`Some`) or remove (`None`, so that CMD never sees
/// a value inherited from elsewhere) for CMD. A list is given only when
/// every member has its item: all tokens or none, all keys or none.
pub fn lock_env(all: &MultiGuard, scheme: Scheme) -> Vec<(&'static str, Option<String>)> {
    let guards = all.guards();
    let names: Vec<String> = guards.iter().map(|g| g.name().to_string()).collect();
    let tokens: Option<Vec<String>> = guards
        .iter()
        .map(|g| g.fencing_token().map(|t| t.to_string()))
        .collect();
    let keys: Option<Vec<String>> = guards
        .iter()
        .map(|g| g.server_key().map(str::to_string))
        .collect();
    let mut env = vec![
        (LOCK_NAME, Some(names.join(" "))),
        (TOKEN, tokens.as_ref().map(|t| t.join(" "))),
        (LOCK_KEY, keys.as_ref().map(|k| k.join(" "))),
    ];
    if scheme == Scheme::Etcd {
        let one = guards.len() == 1;
        let first = |list: &Option<Vec<String>>| {
            list.as_ref()
                .filter(|_| one)
                .and_then(|l| l.first().cloned())
        };
        env.push((ETCD_LOCK_KEY, first(&keys)));
        env.push((ETCD_LOCK_REV, first(&tokens)));
    }
    env
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use distlock::{AcquireOptions, DistributedLockExt, LockName, LockService, MemoryLock};

    use super::*;

    fn get(env: &[(&str, Option<String>)], var: &str) -> Option<Option<String>> {
        env.iter().find(|(v, _)| *v == var).map(|(_, x)| x.clone())
    }

    #[tokio::test]
    async fn names_and_tokens_in_acquisition_order() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let names = [LockName::new("b").unwrap(), LockName::new("a").unwrap()];
        let all = locks
            .acquire_all(&names, &AcquireOptions::new())
            .await
            .unwrap();
        let env = lock_env(&all, Scheme::Memory);
        assert_eq!(get(&env, LOCK_NAME), Some(Some("a b".into())));
        let tokens: Vec<String> = all
            .guards()
            .iter()
            .map(|g| g.fencing_token().unwrap().to_string())
            .collect();
        assert_eq!(get(&env, TOKEN), Some(Some(tokens.join(" "))));
        // The memory backend tells no server key: the variable is removed.
        assert_eq!(get(&env, LOCK_KEY), Some(None));
        // etcdctl's variables belong to etcd only.
        assert_eq!(get(&env, ETCD_LOCK_KEY), None);
        let etcd = lock_env(&all, Scheme::Etcd);
        assert_eq!(
            get(&etcd, ETCD_LOCK_REV),
            Some(None),
            "several names: unset"
        );
        all.release().await.unwrap();
    }
}

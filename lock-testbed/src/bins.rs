//! Where the server programs are: PATH and Debian paths, each overridable by env var.

use std::path::{Path, PathBuf};

use crate::TestbedError;

/// A program this crate runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    /// Default program name, looked up on PATH.
    pub(crate) default: &'static str,
    /// Environment variable holding a name or path instead.
    pub(crate) env: &'static str,
    /// Debian package providing the default.
    pub(crate) package: &'static str,
}

pub(crate) const REDIS_SERVER: Tool = Tool {
    default: "redis-server",
    env: "DISTLOCK_REDIS_SERVER",
    package: "redis-server",
};
pub(crate) const ETCD: Tool = Tool {
    default: "etcd",
    env: "DISTLOCK_ETCD",
    package: "etcd-server",
};
/// etcdctl is not needed by this crate itself (readiness and leader queries use the
/// HTTP gateway); [`crate::etcdctl_path`] resolves it for tests that want it.
pub(crate) const ETCDCTL: Tool = Tool {
    default: "etcdctl",
    env: "DISTLOCK_ETCDCTL",
    package: "etcd-client",
};
/// The Python that runs the kazoo interop script: Debian's own interpreter,
/// which the `python3-kazoo` package serves (a pyenv or venv `python3` earlier
/// on `PATH` would not see it, and Debian's refuses `pip install`, PEP 668).
pub(crate) const PYTHON: Tool = Tool {
    default: "/usr/bin/python3",
    env: "DISTLOCK_PYTHON",
    package: "python3-kazoo",
};
/// The JDK's compiler: its presence says the JDK's source launcher (which
/// runs the Curator participant's `.java` file) is there too.
pub(crate) const JAVAC: Tool = Tool {
    default: "javac",
    env: "DISTLOCK_JAVAC",
    package: "default-jdk-headless",
};
pub(crate) const JAVA: Tool = Tool {
    default: "java",
    env: "DISTLOCK_JAVA",
    package: "openjdk-17-jre-headless",
};

/// Env var for the ZooKeeper class path.
pub(crate) const ZK_CLASSPATH_ENV: &str = "DISTLOCK_ZK_CLASSPATH";
/// Default ZooKeeper class path (Debian packages `libzookeeper-java` via `zookeeper`,
/// and `libslf4j-java`).
pub(crate) const ZK_CLASSPATH_DEFAULT: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// Env var for the directory holding PostgreSQL's `initdb` and `postgres`.
pub(crate) const POSTGRES_BIN_DIR_ENV: &str = "DISTLOCK_POSTGRES_BIN_DIR";
/// Where Debian's `postgresql` package installs them: `<this>/<major>/bin`.
pub(crate) const POSTGRES_LIB_DEFAULT: &str = "/usr/lib/postgresql";
/// The Debian package providing PostgreSQL's server programs.
pub(crate) const POSTGRES_PACKAGE: &str = "postgresql";

pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Resolve `tool` from the environment (the real one).
pub(crate) fn resolve(tool: Tool) -> Result<PathBuf, TestbedError> {
    resolve_with(tool, env_var(tool.env), std::env::var_os("PATH"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

pub(crate) fn resolve_with(
    tool: Tool,
    override_value: Option<String>,
    path_var: Option<std::ffi::OsString>,
) -> Result<PathBuf, TestbedError> {
    let (name, from_env) = match &override_value {
        Some(v) => (v.trim().to_string(), true),
        None => (tool.default.to_string(), false),
    };
    let not_found = |looked_at: String| TestbedError::NotInstalled {
        what: tool.default.to_string(),
        looked_at,
        package: tool.package,
        env: tool.env,
    };
    if name.contains('/') {
        let p = PathBuf::from(&name);
        if is_executable(&p) {
            return Ok(p);
        }
        let origin = if from_env {
            format!(" (from {})", tool.env)
        } else {
            String::new()
        };
        return Err(not_found(format!(
            "`{name}`{origin} is not an executable file"
        )));
    }
    let dirs: Vec<PathBuf> = path_var
        .as_deref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for dir in &dirs {
        let candidate = dir.join(&name);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    let origin = if from_env {
        format!(" (from {})", tool.env)
    } else {
        String::new()
    };
    Err(not_found(format!("`{name}`{origin} is not on PATH")))
}

/// The ZooKeeper class path, every plain entry checked to exist.
/// The Netty jars ZooKeeper's TLS port needs (Debian's `libnetty-java`,
/// installed with `zookeeper`), as a class path.
pub(crate) fn netty_classpath() -> Result<String, TestbedError> {
    let jars: Vec<String> = NETTY_JARS
        .iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .collect();
    if let Some(missing) = jars.iter().find(|j| !Path::new(j).exists()) {
        return Err(TestbedError::NotInstalled {
            what: format!("the Netty jar {missing} (ZooKeeper's TLS port)"),
            looked_at: missing.clone(),
            package: "libnetty-java",
            env: ZK_CLASSPATH_ENV,
        });
    }
    Ok(jars.join(":"))
}

/// The Netty modules of [`netty_classpath`].
const NETTY_JARS: &[&str] = &[
    "netty-buffer",
    "netty-codec",
    "netty-common",
    "netty-handler",
    "netty-resolver",
    "netty-transport",
    "netty-transport-native-unix-common",
];

/// The jars a Curator participant needs (Debian's `libcurator-recipes-java`
/// and what it depends on), as a class path.
pub(crate) fn curator_classpath() -> Result<String, TestbedError> {
    let jars: Vec<String> = CURATOR_JARS
        .iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .collect();
    if let Some(missing) = jars.iter().find(|j| !Path::new(j).exists()) {
        return Err(TestbedError::NotInstalled {
            what: format!("the Curator jar {missing}"),
            looked_at: missing.clone(),
            package: "libcurator-recipes-java",
            env: "(none)",
        });
    }
    Ok(jars.join(":"))
}

/// The jars of [`curator_classpath`].
const CURATOR_JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

pub(crate) fn zk_classpath() -> Result<String, TestbedError> {
    zk_classpath_with(env_var(ZK_CLASSPATH_ENV))
}

pub(crate) fn zk_classpath_with(override_value: Option<String>) -> Result<String, TestbedError> {
    let from_env = override_value.is_some();
    let cp = override_value.unwrap_or_else(|| ZK_CLASSPATH_DEFAULT.to_string());
    for entry in cp.split(':').filter(|e| !e.is_empty()) {
        if entry.contains('*') {
            continue;
        }
        if !Path::new(entry).exists() {
            let package = if entry.contains("slf4j") {
                "libslf4j-java"
            } else {
                "zookeeper"
            };
            let origin = if from_env {
                format!(" (from {ZK_CLASSPATH_ENV})")
            } else {
                String::new()
            };
            return Err(TestbedError::NotInstalled {
                what: format!("ZooKeeper class path entry {entry}"),
                looked_at: format!("`{entry}`{origin} does not exist"),
                package,
                env: ZK_CLASSPATH_ENV,
            });
        }
    }
    Ok(cp)
}

/// PostgreSQL's program dir: `DISTLOCK_POSTGRES_BIN_DIR`, else the highest
/// `/usr/lib/postgresql/<major>/bin` holding both `initdb` and `postgres`.
pub(crate) fn postgres_bin_dir() -> Result<PathBuf, TestbedError> {
    postgres_bin_dir_with(
        env_var(POSTGRES_BIN_DIR_ENV),
        Path::new(POSTGRES_LIB_DEFAULT),
    )
}

fn has_postgres_programs(dir: &Path) -> bool {
    is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"))
}

pub(crate) fn postgres_bin_dir_with(
    override_value: Option<String>,
    lib: &Path,
) -> Result<PathBuf, TestbedError> {
    let not_found = |looked_at: String| TestbedError::NotInstalled {
        what: "PostgreSQL (initdb, postgres)".to_string(),
        looked_at,
        package: POSTGRES_PACKAGE,
        env: POSTGRES_BIN_DIR_ENV,
    };
    if let Some(dir) = override_value {
        let dir = PathBuf::from(dir.trim());
        if has_postgres_programs(&dir) {
            return Ok(dir);
        }
        return Err(not_found(format!(
            "`{}` (from {POSTGRES_BIN_DIR_ENV}) has no executable initdb and postgres",
            dir.display()
        )));
    }
    let newest = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            has_postgres_programs(&bin).then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major);
    match newest {
        Some((_, bin)) => Ok(bin),
        None => Err(not_found(format!(
            "no `{}/<major>/bin` with initdb and postgres",
            lib.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_package_and_env_var() {
        let err = resolve_with(REDIS_SERVER, None, Some("/nonexistent-dir".into())).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "redis-server not found: install the Debian package `redis-server` \
                 (`cargo xtask test` installs it) or set DISTLOCK_REDIS_SERVER"
            ),
            "{msg}"
        );
        let err = resolve_with(ETCD, Some("/no/such/etcd".into()), None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`etcd-server`"), "{msg}");
        assert!(msg.contains("DISTLOCK_ETCD"), "{msg}");
        assert!(msg.contains("/no/such/etcd"), "{msg}");
        let msg = resolve_with(JAVA, None, None).unwrap_err().to_string();
        assert!(msg.contains("openjdk-17-jre-headless"), "{msg}");
        assert!(msg.contains("DISTLOCK_JAVA"), "{msg}");
    }

    #[test]
    fn binaries_are_found_on_path_and_by_override() {
        let found = resolve_with(REDIS_SERVER, None, std::env::var_os("PATH")).unwrap();
        assert!(found.ends_with("redis-server"));
        let by_path = resolve_with(REDIS_SERVER, Some(found.display().to_string()), None).unwrap();
        assert_eq!(by_path, found);
        let by_name = resolve_with(ETCD, Some("etcdctl".into()), std::env::var_os("PATH")).unwrap();
        assert!(by_name.ends_with("etcdctl"));
    }

    #[test]
    fn postgres_programs_are_found_or_named() {
        let found = postgres_bin_dir_with(None, Path::new(POSTGRES_LIB_DEFAULT)).unwrap();
        assert!(has_postgres_programs(&found), "{}", found.display());
        let again = postgres_bin_dir_with(Some(found.display().to_string()), Path::new("/x"));
        assert_eq!(again.unwrap(), found);
        let msg = postgres_bin_dir_with(None, Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`postgresql`"), "{msg}");
        assert!(msg.contains("DISTLOCK_POSTGRES_BIN_DIR"), "{msg}");
        let msg = postgres_bin_dir_with(Some("/no/such/dir".into()), Path::new("/x"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("/no/such/dir"), "{msg}");
    }

    #[test]
    fn zk_classpath_is_checked() {
        assert_eq!(zk_classpath_with(None).unwrap(), ZK_CLASSPATH_DEFAULT);
        let msg = zk_classpath_with(Some("/no/zookeeper.jar:/usr/share/java/*".into()))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`zookeeper`"), "{msg}");
        assert!(msg.contains("DISTLOCK_ZK_CLASSPATH"), "{msg}");
    }
}

//! `with_lock` and a fenced write on the etcd backend.
//!
//! ```text
//! cargo run -p distlock --example etcd -- [URL]
//! ```
//!
//! The URL comes from the first argument, else `DISTLOCK_URL`, else the
//! server(s) of the repository's `docker/` compose files: `etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379`.

#[path = "shared/mod.rs"]
mod shared;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    shared::run(&shared::url_from_args(
        "etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379",
    ))
    .await
}

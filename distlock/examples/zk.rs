//! `with_lock` and a fenced write on the zk backend.
//!
//! ```text
//! cargo run -p distlock --example zk -- [URL]
//! ```
//!
//! The URL comes from the first argument, else `DISTLOCK_URL`, else the
//! server(s) of the repository's `docker/` compose files: `zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183`.

#[path = "shared/mod.rs"]
mod shared;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    shared::run(&shared::url_from_args(
        "zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183",
    ))
    .await
}

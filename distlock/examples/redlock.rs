//! `with_lock` and a fenced write on the redlock backend.
//!
//! ```text
//! cargo run -p distlock --example redlock -- [URL]
//! ```
//!
//! The URL comes from the first argument, else `DISTLOCK_URL`, else the
//! server(s) of the repository's `docker/` compose files: `redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005`.

#[path = "shared/mod.rs"]
mod shared;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    shared::run(&shared::url_from_args(
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005",
    ))
    .await
}

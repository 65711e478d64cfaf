//! `with_lock` and a fenced write on the redis backend.
//!
//! ```text
//! cargo run -p distlock --example redis -- [URL]
//! ```
//!
//! The URL comes from the first argument, else `DISTLOCK_URL`, else the
//! server(s) of the repository's `docker/` compose files: `redis://127.0.0.1:6379`.

#[path = "shared/mod.rs"]
mod shared;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    shared::run(&shared::url_from_args("redis://127.0.0.1:6379")).await
}

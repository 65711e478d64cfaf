//! `with_lock` and a fenced write on the in-process backend: runs anywhere.
//!
//! ```text
//! cargo run -p distlock --example memory
//! ```

#[path = "shared/mod.rs"]
mod shared;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    shared::run(&shared::url_from_args("memory://")).await
}

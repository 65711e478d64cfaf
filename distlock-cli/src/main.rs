//! `distlock`: run a command while holding a distributed lock, or show a lock's state.

fn main() {
    distlock_cli::main()
}

//! `distlock completions` and `distlock man`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen) from the command line's own
//! definition, so that they never disagree with `--help`.

use std::io::Write;
use std::path::Path;

use crate::args::{CompletionsArgs, ManArgs};
use crate::exit_code;
use crate::report::fail;

/// Prints the completion script of `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> i32 {
    let mut cmd = crate::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "distlock", &mut out);
    write_stdout(&out)
}

/// Prints the main man page on stdout, or writes every page into `args.out`.
pub fn man(args: ManArgs) -> i32 {
    match args.out {
        Some(dir) => match write_pages(&dir) {
            Ok(()) => 0,
            Err(err) => fail(
                exit_code::SOFTWARE,
                format!("cannot write the man pages into {}: {err}", dir.display()),
            ),
        },
        None => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(crate::command()).render(&mut out) {
                Ok(()) => write_stdout(&out),
                Err(err) => fail(
                    exit_code::SOFTWARE,
                    format!("cannot render the man page: {err}"),
                ),
            }
        }
    }
}

/// `distlock.1` and one page per visible subcommand (`distlock-run.1`, ...).
fn write_pages(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(crate::command(), dir)
}

fn write_stdout(bytes: &[u8]) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(err) => fail(
            exit_code::SOFTWARE,
            format!("cannot write to stdout: {err}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_is_written() {
        let dir = tempfile::tempdir().unwrap();
        write_pages(dir.path()).unwrap();
        for page in [
            "distlock.1",
            "distlock-run.1",
            "distlock-status.1",
            "distlock-list.1",
            "distlock-release.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
            assert!(text.contains(".TH"), "{page} is not roff: {text}");
        }
        let run = std::fs::read_to_string(dir.path().join("distlock-run.1")).unwrap();
        for needle in ["DISTLOCK_TTL", "\\-\\-permits", "forever"] {
            assert!(run.contains(needle), "distlock-run.1 lacks {needle}");
        }
        assert!(
            !dir.path().join("distlock-man.1").exists(),
            "the hidden command has no page"
        );
    }
}

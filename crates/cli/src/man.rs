//! `profdev man DIR`: write profdev's manual under DIR, a man hierarchy
//! such as `/usr/local/share/man`.
//!
//! The pages are generated from what the program and its crates already
//! say, so that none can drift from the code:
//!
//! * **Section 1**, `profdev(1)` and one page per subcommand,
//!   `profdev-NAME(1)`: NAME from the command table, SYNOPSIS and OPTIONS
//!   from the command's description as a `clap::Command` (the one its
//!   `--help` is printed from), DESCRIPTION and the sections after it from
//!   the command module's doc. A command named after a classic tool also
//!   gets `NAME(1)` (`kprof.1`, `prfpr.1`...), a `.so` link to its page,
//!   since it runs under that name through a link.
//! * **Section 3**, `profdev_profil(3)`: the profil library, written in roff
//!   (`man/profdev_profil.3` in the source tree); a test holds it to the
//!   functions `profdev_profil.h` declares.
//! * **Section 4**, the devices `kprof`, `prof`, `kgmon`, `prf`: each
//!   device module's doc, which is its man page.
//! * **Section 5**, the files `kpdata`, `gmon.out` and the prf log
//!   (`prflog`): each format module's doc.
//!
//! Every file is written through `profdev_safefile` (a unique temporary in
//! the directory, renamed over the page; a symbolic link at the page's name
//! is replaced, never followed), mode 0644; the directories are created
//! 0755 if missing. Pages render without a warning under
//! `groff -man -ww -z` (a test checks each one).
//!
//! # Example
//!
//! ```text
//! # profdev man /usr/local/share/man && mandb -q
//! profdev man: wrote 38 pages under /usr/local/share/man
//! $ man 4 kprof
//! ```

use anyhow::{Context, Result};
use clap::Parser;
use profdev_man::Page;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write profdev's man pages (sections 1, 3, 4 and 5) under DIR.
#[derive(Parser, Debug)]
#[command(name = "profdev man", version)]
pub(crate) struct Args {
    /// The root of a man hierarchy, such as /usr/local/share/man: the
    /// pages go to DIR/man1, DIR/man3, DIR/man4 and DIR/man5.
    #[arg(value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    dir: PathBuf,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev man", args) {
        Ok(args) => crate::cmdline::finish("profdev man", run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let pages = pages();
    let mut sections: Vec<u8> = pages.iter().map(|p| p.section).collect();
    sections.dedup();
    for section in sections {
        let dir = args.dir.join(format!("man{section}"));
        let dir = profdev_safefile::create_dir(&dir, crate::output::DIR_MODE)?;
        for page in pages.iter().filter(|p| p.section == section) {
            dir.write_file(page.file_name(), page.text.as_bytes(), 0o644)
                .with_context(|| format!("cannot write the page {}", page.file_name()))?;
        }
    }
    println!(
        "profdev man: wrote {} pages under {}",
        pages.len(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A subcommand's description as clap sees it: named as it is invoked.
pub fn cli(c: &crate::Command) -> clap::Command {
    let cmd = (c.cli)();
    let name = format!("profdev {}", c.name);
    let mut cmd = cmd.name(&name).bin_name(&name);
    cmd.build();
    cmd
}

/// Every page of the manual: `profdev_man` over the command table.
pub fn pages() -> Vec<Page> {
    let commands: Vec<profdev_man::Command> = crate::COMMANDS
        .iter()
        .map(|c| profdev_man::Command {
            name: c.name,
            about: c.about,
            cli: cli(c),
            doc: c.doc,
            classic: c.classic,
        })
        .collect();
    profdev_man::pages(&commands, env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_man::mdroff::escape;

    #[test]
    fn every_command_has_a_page_with_a_description_and_its_options() {
        let pages = pages();
        for c in crate::COMMANDS {
            let name = format!("profdev-{}", c.name);
            let page = pages
                .iter()
                .find(|p| p.name == name && p.section == 1)
                .unwrap_or_else(|| panic!("no page for {}", c.name));
            let desc = page
                .text
                .split(".SH DESCRIPTION\n")
                .nth(1)
                .unwrap_or_else(|| panic!("{name} has no DESCRIPTION"));
            let desc = desc.split("\n.SH").next().unwrap();
            assert!(
                desc.split_whitespace().count() >= 15,
                "{name}'s DESCRIPTION is too thin: write the module doc of its command:\n{desc}"
            );
            for arg in cli(c).get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(s) = arg.get_short() {
                    assert!(page.text.contains(&format!("\\-{s}")), "{name}: -{s}");
                }
                if let Some(l) = arg.get_long() {
                    let l = escape(l, true);
                    assert!(page.text.contains(&format!("\\-\\-{l}")), "{name}: --{l}");
                }
            }
        }
    }
}

//! Internal harness: `profdev-coverage-run [-v] [--hits] [-m MODULE]... --
//! CMD [ARGS]` runs CMD under coverage and prints, per module, the blocks
//! executed, the blocks counted, and the notes; with `-v`, every block's
//! count; with `--hits`, in hit mode (what `profdev cprof CMD` without
//! `-f` runs: whether each block ran, not how often).
//! The user command is `profdev cprof`.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut select = Vec::new();
    let mut verbose = false;
    let mut mode = profdev_coverage::plan::Mode::Counts;
    let mut cmd = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-m" => select.extend(args.next()),
            "-v" => verbose = true,
            "--hits" => mode = profdev_coverage::plan::Mode::Hits,
            "--" => {
                cmd.extend(args.by_ref());
            }
            _ => {
                cmd.push(a);
                cmd.extend(args.by_ref());
            }
        }
    }
    let Some((prog, rest)) = cmd.split_first() else {
        eprintln!("usage: profdev-coverage-run [-v] [--hits] [-m MODULE]... -- CMD [ARGS]");
        return ExitCode::from(2);
    };
    let mut c = Command::new(prog);
    c.args(rest);
    let t = std::time::Instant::now();
    let run = match profdev_coverage::launch::launch_in(c, &select, mode) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("profdev-coverage-run: {e}");
            return ExitCode::from(1);
        }
    };
    let el = t.elapsed();
    for m in &run.modules {
        let ran = m.blocks.iter().filter(|b| b.count > 0).count();
        let total: u64 = m.blocks.iter().map(|b| b.count).sum();
        eprintln!(
            "{}: {ran} of {} blocks executed, {total} block executions, {} uncounted",
            m.path.display(),
            m.blocks.len(),
            m.uncounted
        );
        if verbose {
            for b in &m.blocks {
                eprintln!("  {:#x} {}", b.start, b.count);
            }
        }
    }
    for n in &run.notes {
        eprintln!("note: {n}");
    }
    eprintln!(
        "elapsed {:.3}s, {:?}, {} loads encoded from the cache",
        el.as_secs_f64(),
        run.status,
        run.from_cache
    );
    // Out without freeing the counts (cc1's are millions of blocks): the
    // kernel takes the memory back at once.
    let _ = std::io::Write::flush(&mut std::io::stderr());
    std::process::exit(i32::from(run.status.code().unwrap_or(1) as u8))
}

//! How the coverage planner would count a module: `cargo run -p
//! profdev-coverage --example plan_report -- FILE [--all] [--hits]` prints
//! how many blocks each method counts (a jump, a hop, a breakpoint, ...)
//! and every block left uncounted (with `--all`, every block), for looking
//! into a module whose blocks trap or go uncounted; with `--hits`, the
//! hit-mode plan (cprof's marks: implied blocks have no probe).

use profdev_coverage::plan::{How, Mode, Plan};
use std::collections::BTreeMap;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: plan_report FILE [--all]");
        std::process::exit(2);
    };
    let all = args.iter().any(|a| a == "--all");
    let mode = if args.iter().any(|a| a == "--hits") {
        Mode::Hits
    } else {
        Mode::Counts
    };
    let planned = std::fs::read(file)
        .map_err(|e| e.to_string())
        .and_then(|b| Plan::of_bytes_in(&b, Path::new(file), mode).map_err(|e| e.to_string()));
    let plan = match planned {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan_report: {e}");
            std::process::exit(1);
        }
    };
    let mut by_how: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &plan.blocks {
        let name = match b.how {
            How::Jmp { .. } => "jmp",
            How::Int3 { .. } => "int3",
            How::Hop { .. } => "hop",
            How::Call { .. } => "call",
            How::Covered => "covered",
            How::Fell { .. } => "fell",
            How::Implied { .. } => "implied",
            How::Branches { .. } => "branches",
            How::None => "uncounted",
            How::Once => "once",
        };
        *by_how.entry(name).or_default() += 1;
        if all || b.how == How::None {
            println!(
                "{:#x}..{:#x} {:?} live={} br={:?}",
                b.start, b.end, b.how, b.flags_live, b.branch
            );
        }
    }
    eprintln!(
        "{file}: {} blocks, {} probes",
        plan.blocks.len(),
        plan.probes()
    );
    eprintln!(
        "  branches: {} ({} with the flags live where they fall through)",
        plan.branches.len(),
        plan.branches.iter().filter(|b| b.1).count()
    );
    eprintln!(
        "  blocks with the flags live: {}",
        plan.blocks.iter().filter(|b| b.flags_live).count()
    );
    for (how, n) in by_how {
        eprintln!("  {how}: {n}");
    }
}

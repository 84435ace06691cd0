//! The planner and encoder on real modules: blocks are disjoint and
//! sorted, windows stay inside their block, and every trampoline decodes.

use profdev_coverage::encode::{encode, PATCH_JMP};
use profdev_coverage::plan::{How, Plan};
use std::path::Path;

fn libc() -> std::path::PathBuf {
    let out = std::process::Command::new("cc")
        .arg("-print-file-name=libc.so.6")
        .output()
        .expect("cc runs");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::fs::canonicalize(p).expect("libc.so.6 exists")
}

fn check(path: &Path) {
    let t = std::time::Instant::now();
    let plan = Plan::of_file(path).expect("plans");
    let planned = t.elapsed();
    assert!(!plan.blocks.is_empty());
    for w in plan.blocks.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "blocks overlap at {:#x}",
            w[1].start
        );
    }
    let mut hist = std::collections::BTreeMap::new();
    for b in &plan.blocks {
        assert_eq!(b.insns.first(), Some(&b.start));
        let k = match b.how {
            How::Jmp {
                from,
                to,
                overwrite,
            } => {
                assert!(from >= b.start && from < to);
                assert!(overwrite >= 5);
                "jmp"
            }
            How::Int3 { to } => {
                assert!(to > b.start && to <= b.end);
                "int3"
            }
            How::Call { .. } => "call",
            How::None => "none",
            How::Once => "once",
            How::Covered => "covered",
            How::Hop { .. } => "hop",
            How::Fell { .. } => "fell",
            // (Hit mode only: this plan counts.)
            How::Implied { .. } | How::Branches { .. } => panic!("a counting plan derives a hit"),
        };
        *hist.entry(k).or_insert(0u64) += 1;
    }
    let t = std::time::Instant::now();
    let bias = 0x7f00_0000_0000;
    let area = bias - 0x1000_0000;
    let enc = encode(&plan, bias, area, 100);
    eprintln!(
        "{}: {} blocks {:?}, {} branches, planned in {:?}, encoded in {:?}: {} bytes, {} failed",
        path.display(),
        plan.blocks.len(),
        hist,
        plan.branches.len(),
        planned,
        t.elapsed(),
        enc.code.len(),
        enc.failed
    );
    assert!(enc.code.len() as u64 <= profdev_coverage::encode::area_size(&plan));
    for p in &enc.patches {
        if p.kind == profdev_coverage::encode::PATCH_REL8 {
            let d = p.entry as i64 - (p.addr + 2) as i64;
            assert!((-128..=127).contains(&d), "rel8 hop out of reach");
            continue;
        }
        assert!(p.entry >= area && p.entry < area + enc.code.len() as u64);
        if p.kind == PATCH_JMP {
            assert!(p.len >= 5);
        }
    }
}

#[test]
fn plans_libc_and_ls() {
    check(&libc());
    check(Path::new("/bin/ls"));
}

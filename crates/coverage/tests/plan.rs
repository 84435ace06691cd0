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

/// Where block `k`'s last instruction may go on to: its direct target,
/// and the next instruction unless it is a jump or return.
fn ways_on(plan: &Plan, file: &object::File, k: usize) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, OpKind};
    use object::{Object, ObjectSection};
    let last = plan.blocks[k].insns.last().unwrap();
    let s = file
        .sections()
        .find(|s| s.address() <= last && last < s.address() + s.size())
        .expect("the block's section");
    let bytes = s.data().unwrap();
    let at = (last - s.address()) as usize;
    let mut d = Decoder::with_ip(64, &bytes[at..], last, DecoderOptions::NONE);
    let x = d.decode();
    let mut on = Vec::new();
    if x.op_count() > 0 && x.op0_kind() == OpKind::NearBranch64 {
        on.push(x.near_branch_target());
    }
    if !matches!(
        x.flow_control(),
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::Return
    ) {
        on.push(x.next_ip());
    }
    on
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
        assert_eq!(b.insns.first(), Some(b.start));
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

/// A C++ module's landing pads (read from its LSDAs) each start a block
/// that no other block implies or derives, and the rest of the module is
/// pruned as C's is (before, a module with exception tables was not
/// pruned at all). The counts and marks themselves are checked against
/// the single-stepper by the cli's `cprof_guards` (`throw.cpp`).
#[test]
fn a_cpp_modules_landing_pads_start_blocks_and_the_rest_is_pruned() {
    use profdev_coverage::plan::Mode;
    if !profdev_testkit::tools("landing pads", &["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("pads.cpp");
    std::fs::write(
        &src,
        r#"#include <stdexcept>
#include <string>
static volatile int sum;
struct Guard { ~Guard() { sum += 1; } };
__attribute__((noinline)) static void thrower(int i)
{
    if (i % 3 == 0)
        throw std::runtime_error("three");
    sum += i;
}
__attribute__((noinline)) static void middle(int i)
{
    Guard g; // a cleanup pad
    std::string s(i + 20, 'x');
    thrower(i);
    sum += (int)s.size();
}
int main(int argc, char **)
{
    int caught = 0;
    for (int i = 0; i < 9 + argc; i++) {
        try {
            middle(i);
        } catch (const std::exception &) { // a catching pad
            caught++;
        }
        if (i > 4 && sum > 7)
            sum -= 2;
        else if (i < 2)
            sum += 3;
    }
    return caught == 3 ? 0 : 1;
}
"#,
    )
    .unwrap();
    for opt in ["-O0", "-O2"] {
        let exe = dir.path().join(format!("pads{opt}"));
        let o = std::process::Command::new("g++")
            .args([opt, "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("g++ runs");
        assert!(o.status.success(), "g++ {opt}: {o:?}");
        let bytes = std::fs::read(&exe).unwrap();
        let file = profdev_symbolize::elf::parse(&bytes[..], &exe).unwrap();
        let pads = profdev_symbolize::elf::landing_pads(&file).expect("the LSDAs read");
        assert!(pads.len() >= 2, "{opt}: pads {pads:x?}");
        for mode in [Mode::Hits, Mode::Counts] {
            let plan = Plan::of_bytes_in(&bytes, &exe, mode).expect("plans");
            for &pad in &pads {
                let k = plan
                    .blocks
                    .binary_search_by_key(&pad, |b| b.start)
                    .unwrap_or_else(|_| {
                        panic!("{opt} {mode:?}: no block starts at the pad {pad:#x}")
                    });
                // Never implied by a block before it (the unwinder enters
                // it from none): its hit is its own, or read from the
                // blocks it goes on to, which it dominates (dom.rs).
                let on = ways_on(&plan, &file, k);
                let read = match plan.blocks[k].how {
                    How::Implied { by } => vec![by],
                    How::Branches { taken, fell } => vec![taken, fell],
                    _ => vec![],
                };
                assert!(
                    read.iter()
                        .all(|&r| on.contains(&plan.blocks[r as usize].start)),
                    "{opt}: the pad at {pad:#x} is implied: {:?}, it goes on to {on:x?}",
                    plan.blocks[k].how
                );
                assert!(
                    plan.derived_of(k).is_none(),
                    "{opt}: the pad at {pad:#x} is derived"
                );
            }
            let pruned = match mode {
                Mode::Counts => !plan.derived.is_empty(),
                _ => plan
                    .blocks
                    .iter()
                    .any(|b| matches!(b.how, How::Implied { .. } | How::Branches { .. })),
            };
            assert!(
                pruned,
                "{opt} {mode:?}: nothing pruned in a module with exception tables"
            );
        }
    }
}

//! Names GNU gprof drops (issue 25, item 3), with the installed gprof as
//! the oracle: a local function whose name holds `$` (Rust's legacy
//! mangling) or a `.isra.0`, `.part.0`, `.cold`, `.lto_priv.0` suffix is
//! left out by gprof, and its time is charged to the function before it
//! (`frame_dummy`). The symbols files profdev writes (`CMD.syms`,
//! `vmlinux.syms`) keep every function under a name gprof keeps.
//!
//! The profiles are synthetic (histograms built here, ticks placed in the
//! functions), so the assertions are about how gprof attributes a given
//! gmon.out, not about where timer samples land: gprof's self share of
//! each function must be within 1 point of the share the symbol table
//! gives it (profdev's own attribution), and crt functions get under 5%.

use profdev_formats::gmon::{self, Arc, GmonOut, Histogram};
use profdev_formats::symelf::{Binding, Symbol};
use profdev_gprof::symbols::{self, Reason};
use profdev_gprof::Program;
use profdev_symbolize::{KSym, KernelSymbols};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// crt functions: what gprof charged the dropped functions' time to.
const CRT: &[&str] = &[
    "frame_dummy",
    "_init",
    "_start",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
];

/// Functions named as gprof drops them (asm labels), each spinning on its
/// own; `noclone` keeps GCC from renaming them further.
const NAMED_C: &str = r#"
volatile unsigned long sink, n = 1000;
#define SPIN(label, k) \
  static __attribute__((noinline, noclone, used)) void f_##k(void) __asm__(label); \
  static __attribute__((noinline, noclone, used)) void f_##k(void) \
  { for (unsigned long i = 0; i < n; i++) sink += i * k; }
SPIN("_ZN4core3ptr13drop_in_place$LT$u8$GT$17h0123456789abcdefE", 3)
SPIN("_ZN4demo4main28_$u7b$$u7b$closure$u7d$$u7d$17hfedcba9876543210E", 5)
SPIN("finish_task_switch.isra.0", 7)
SPIN("work.cold", 11)
SPIN("helper.part.0", 13)
SPIN("cache.lto_priv.0", 17)
SPIN("kept.constprop.0", 19)
SPIN("plain_static", 23)
int main(void) { f_3(); f_5(); f_7(); f_11(); f_13(); f_17(); f_19(); f_23(); return 0; }
"#;

/// The same program without such names.
const PLAIN_C: &str = r#"
volatile unsigned long sink, n = 1000;
static __attribute__((noinline, noclone, used)) void spin(void)
{ for (unsigned long i = 0; i < n; i++) sink += i; }
int main(void) { spin(); return 0; }
"#;

fn ready(what: &str, tools: &[&str]) -> bool {
    profdev_testkit::tools(what, tools)
}

/// `src` compiled by `gcc -O2` into `dir/name`.
fn gcc(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let o = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&c)
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

/// A gmon.out over `[low, high)` (one cell per 4 bytes) with `ticks` in
/// one cell well inside each function, and `arcs`.
fn profile(low: u64, high: u64, ticks: &[(&Symbol, u16)], arcs: Vec<Arc>) -> GmonOut {
    let mut h = Histogram::new(low, high, ((high - low) / 4) as usize, 1000);
    let span = u128::from(high - low);
    let n = h.bins.len() as u128;
    for (s, t) in ticks {
        let mid = s.addr + s.size / 2;
        let i = (u128::from(mid - low) * n / span) as usize;
        let lo = low + (i as u128 * span / n) as u64;
        let hi = low + ((i as u128 + 1) * span / n) as u64;
        assert!(
            lo >= s.addr && hi <= s.addr + s.size,
            "the cell of {} is not inside it",
            s.name
        );
        h.bins[i] += t;
    }
    GmonOut {
        histograms: vec![h],
        arcs,
        ..GmonOut::default()
    }
}

/// profdev's attribution of `g`'s histogram: each cell's ticks to the
/// function of `table` holding the cell (its address within the symbol's
/// size), as shares in percent.
fn own_shares(g: &GmonOut, table: &[Symbol]) -> BTreeMap<String, f64> {
    let h = &g.histograms[0];
    let span = u128::from(h.high_pc - h.low_pc);
    let n = h.bins.len() as u128;
    let total: u64 = h.bins.iter().map(|&b| u64::from(b)).sum();
    let mut out = BTreeMap::new();
    for (i, &b) in h.bins.iter().enumerate().filter(|(_, &b)| b > 0) {
        let pc = h.low_pc + (i as u128 * span / n) as u64;
        let f = table
            .iter()
            .find(|s| s.addr <= pc && pc < s.addr + s.size)
            .expect("every tick is in a function");
        *out.entry(f.name.clone()).or_insert(0.0) += 100.0 * f64::from(b) / total as f64;
    }
    out
}

/// `gprof -b -p --no-demangle SYMS GMON` in `dir`: the flat profile's
/// `% time` by name.
fn gprof_flat(dir: &Path, syms: &Path, gmon: &Path) -> BTreeMap<String, f64> {
    let o = Command::new("gprof")
        .args(["-b", "-p", "--no-demangle"])
        .arg(syms)
        .arg(gmon)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "gprof: {o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let pct: f64 = t.first()?.parse().ok()?;
            t.get(1)?.parse::<f64>().ok()?;
            t.get(2)?.parse::<f64>().ok()?;
            Some((t.last()?.to_string(), pct))
        })
        .collect()
}

/// gprof's shares of the profile `g` read with `syms` agree with
/// profdev's own attribution within 1 point, and crt functions get under
/// 5%.
fn assert_gprof_agrees(dir: &Path, syms: &Path, g: &GmonOut, table: &[Symbol]) {
    let gmon_out = dir.join("gmon.out");
    std::fs::write(
        &gmon_out,
        gmon::write(g, gmon::Format::Gnu, gmon::Target::X86_64).unwrap(),
    )
    .unwrap();
    let flat = gprof_flat(dir, syms, &gmon_out);
    let own = own_shares(g, table);
    for (name, share) in &own {
        let theirs = flat.get(name).copied().unwrap_or(0.0);
        assert!(
            (theirs - share).abs() <= 1.0,
            "{name}: gprof {theirs}%, profdev {share}%\n{flat:#?}"
        );
    }
    let crt: f64 = CRT.iter().filter_map(|c| flat.get(*c)).sum();
    assert!(crt < 5.0, "{crt}% on crt functions\n{flat:#?}");
}

fn find<'a>(exe: &'a Program, name: &str) -> &'a Symbol {
    exe.table
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} not in {:?}", exe.table))
}

#[test]
fn names_gprof_drops_are_global_in_cmd_syms() {
    if !ready(
        "gprof on a C program with names gprof drops",
        &["gcc", "gprof"],
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = Program::open(&gcc(d.path(), "named", NAMED_C)).unwrap();
    let dollar = "_ZN4core3ptr13drop_in_place$LT$u8$GT$17h0123456789abcdefE";
    let closure = "_ZN4demo4main28_$u7b$$u7b$closure$u7d$$u7d$17hfedcba9876543210E";
    let ticks: Vec<(&Symbol, u16)> = [
        (dollar, 300),
        (closure, 200),
        ("finish_task_switch.isra.0", 150),
        ("work.cold", 120),
        ("helper.part.0", 100),
        ("cache.lto_priv.0", 60),
        ("kept.constprop.0", 40),
        ("plain_static", 20),
        ("main", 10),
    ]
    .iter()
    .map(|&(n, t)| (find(&exe, n), t))
    .collect();
    let main = find(&exe, "main");
    let arcs = vec![Arc {
        from_pc: main.addr + 1,
        self_pc: find(&exe, "finish_task_switch.isra.0").addr,
        count: 7,
    }];
    let g = profile(exe.lowpc, exe.highpc, &ticks, arcs);

    // The binary itself: gprof drops the names (today's profile).
    let gmon_out = d.path().join("gmon.out");
    std::fs::write(
        &gmon_out,
        gmon::write(&g, gmon::Format::Gnu, gmon::Target::X86_64).unwrap(),
    )
    .unwrap();
    let direct = gprof_flat(d.path(), &exe.path, &gmon_out);
    assert!(
        !direct.contains_key("finish_task_switch.isra.0"),
        "{direct:#?}"
    );
    assert!(!direct.contains_key(dollar), "{direct:#?}");

    // CMD.syms: every function, under its own name, at its address with
    // its size.
    let file = symbols::exe_symbols_elf(&exe).expect("a symbols file");
    let Reason::Names(names) = &file.reason else {
        panic!("{:?}", file.reason)
    };
    let mut names = names.clone();
    names.sort();
    assert_eq!(
        names,
        [
            dollar,
            closure,
            "cache.lto_priv.0",
            "finish_task_switch.isra.0",
            "helper.part.0",
            "work.cold",
        ]
    );
    let syms = d.path().join("named.syms");
    std::fs::write(&syms, &file.elf).unwrap();
    {
        use object::{Object, ObjectSymbol};
        let f = object::File::parse(&*file.elf).unwrap();
        for s in &exe.table {
            let w = f
                .symbols()
                .find(|w| w.name() == Ok(s.name.as_str()))
                .unwrap_or_else(|| panic!("{} not written", s.name));
            assert_eq!((w.address(), w.size()), (s.addr, s.size), "{}", s.name);
            if s.name.contains(['.', '$']) {
                assert!(w.is_global(), "{}", s.name);
            } else {
                assert_eq!(w.is_global(), s.binding != Binding::Local, "{}", s.name);
            }
        }
    }
    assert_gprof_agrees(d.path(), &syms, &g, &exe.table);
}

#[test]
fn a_binary_without_such_names_gets_no_symbols_file() {
    if !ready("a C program without names gprof drops", &["gcc"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = Program::open(&gcc(d.path(), "plain", PLAIN_C)).unwrap();
    assert!(
        !exe.table
            .iter()
            .any(|s| symbols::gprof_drops_local(&s.name) && s.binding == Binding::Local),
        "{:?}",
        exe.table
    );
    assert!(symbols::exe_symbols_elf(&exe).is_none());
}

/// A Rust release program: its closures and generic instances are local
/// symbols with `$` (legacy mangling), which gprof drops.
#[test]
fn a_rust_release_program_is_read_through_cmd_syms() {
    if !ready("gprof on a Rust release program", &["rustc", "gprof"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("r.rs");
    std::fs::write(
        &src,
        r#"
use std::collections::HashMap;
#[inline(never)]
fn tally(words: &[String]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for w in words { *m.entry(w.clone()).or_insert(0) += 1; }
    m
}
fn main() {
    let n: usize = std::env::args().count() * 1000;
    let words: Vec<String> = (0..n).map(|i| format!("w{}", i % 97)).collect();
    let mut v: Vec<_> = tally(&words).into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1));
    println!("{:?}", v.first());
}
"#,
    )
    .unwrap();
    let exe_path = d.path().join("r");
    let o = Command::new("rustc")
        .args(["-O", "-o"])
        .arg(&exe_path)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "rustc: {o:?}");
    let exe = Program::open(&exe_path).unwrap();
    let file = symbols::exe_symbols_elf(&exe).expect("a symbols file");
    let Reason::Names(names) = &file.reason else {
        panic!("{:?}", file.reason)
    };
    assert!(names.iter().any(|n| n.contains('$')), "{names:?}");
    // Ticks in the largest functions gprof would drop, and in main.
    let mut dropped: Vec<&Symbol> = exe
        .table
        .iter()
        .filter(|s| s.binding == Binding::Local && s.name.contains('$') && s.size >= 64)
        .filter(|s| exe.table.iter().filter(|o| o.addr == s.addr).count() == 1)
        .collect();
    dropped.sort_by_key(|s| std::cmp::Reverse(s.size));
    assert!(dropped.len() >= 3, "{dropped:?}");
    let mut ticks: Vec<(&Symbol, u16)> = dropped
        .iter()
        .take(4)
        .zip([400, 250, 150, 100])
        .map(|(s, t)| (*s, t))
        .collect();
    ticks.push((find(&exe, "main"), 20));
    let g = profile(exe.lowpc, exe.highpc, &ticks, Vec::new());
    let syms = d.path().join("r.syms");
    std::fs::write(&syms, &file.elf).unwrap();
    assert_gprof_agrees(d.path(), &syms, &g, &exe.table);
}

/// kgmon: a synthetic kallsyms with the clones gprof drops. Each function
/// keeps its time under its own name in `gprof -b vmlinux.syms gmon.out`,
/// none of it printed under the function before it.
#[test]
fn vmlinux_syms_keeps_kernel_clones() {
    if !ready("gprof on a kernel profile", &["gprof"]) {
        return;
    }
    let lo = 0xffff_ffff_8100_0000u64;
    let k = |off: u64, kind: char, name: &str| KSym {
        addr: lo + off,
        kind,
        name: name.into(),
        module: None,
    };
    let running = KernelSymbols::from_symbols(vec![
        k(0x000, 'T', "_stext"),
        k(0x100, 'T', "kthreads_online_cpu"),
        k(0x200, 't', "finish_task_switch.isra.0"),
        k(0x300, 't', "__schedule.cold"),
        k(0x380, 't', "update_load_avg.constprop.0"),
        k(0x400, 't', "tcp_ack.part.0"),
        k(0x480, 't', "do_idle"),
        k(0x1000, 'T', "_etext"),
    ]);
    // Cell i covers [lo + 4i, lo + 4i + 4).
    let mut h = Histogram::new(lo, lo + 0x1000, 0x400, 100);
    let tick = |h: &mut Histogram, off: u64, n: u16| h.bins[(off / 4) as usize] += n;
    tick(&mut h, 0x140, 10);
    tick(&mut h, 0x240, 110);
    tick(&mut h, 0x340, 40);
    tick(&mut h, 0x3a0, 20);
    tick(&mut h, 0x440, 15);
    tick(&mut h, 0x4c0, 5);
    let g = GmonOut {
        histograms: vec![h],
        arcs: vec![Arc {
            from_pc: lo + 0x110,
            self_pc: lo + 0x200,
            count: 3,
        }],
        ..GmonOut::default()
    };
    let (elf, kept) = symbols::vmlinux_syms_named(&running, &g);
    let mut kept = kept;
    kept.sort();
    assert_eq!(
        kept,
        [
            "__schedule.cold",
            "finish_task_switch.isra.0",
            "tcp_ack.part.0"
        ]
    );
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("vmlinux.syms"), &elf).unwrap();
    std::fs::write(
        d.path().join("gmon.out"),
        gmon::write(&g, gmon::Format::Bsd, gmon::Target::X86_64).unwrap(),
    )
    .unwrap();
    let flat = gprof_flat(d.path(), Path::new("vmlinux.syms"), Path::new("gmon.out"));
    let want = [
        ("kthreads_online_cpu", 5.0),
        ("finish_task_switch.isra.0", 55.0),
        ("__schedule.cold", 20.0),
        ("update_load_avg.constprop.0", 10.0),
        ("tcp_ack.part.0", 7.5),
        ("do_idle", 2.5),
    ];
    for (name, share) in want {
        let theirs = flat.get(name).copied().unwrap_or(0.0);
        assert!(
            (theirs - share).abs() <= 1.0,
            "{name}: gprof {theirs}%, want {share}%\n{flat:#?}"
        );
    }
}

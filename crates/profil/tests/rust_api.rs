//! The safe Rust API, in process: Profil::scope, Profil::start, Monitor,
//! gmon. profil is one per process, so the tests take turns.

mod common;

use std::sync::{Mutex, MutexGuard};

use profdev_profil::index::{svr4, Tick};
use profdev_profil::profil::{current, Config};
use profdev_profil::{gmon, mon_out::MonOut, Error, Monitor, Profil};

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[inline(never)]
fn rust_hot(n: u64) -> u64 {
    let mut x = n | 1;
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

fn cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

fn burn(ms: f64) {
    let end = cpu_ms() + ms;
    while cpu_ms() < end {
        std::hint::black_box(rust_hot(std::hint::black_box(20_000)));
    }
}

/// rust_hot's run-time address range, from the test binary's symbol table.
fn hot_range() -> std::ops::Range<usize> {
    let exe = std::env::current_exe().unwrap();
    let elf = common::elf_functions(&exe);
    let (name, &(addr, size)) = elf
        .iter()
        .find(|(n, _)| n.contains("rust_hot"))
        .expect("rust_hot in the symbol table");
    let bias = (rust_hot as *const () as usize).wrapping_sub(addr as usize);
    assert!(name.contains("rust_api"), "{name}");
    let start = addr as usize + bias;
    start..start + size as usize
}

/// Cells of rust_hot for a buffer at `offset` with `scale`.
fn hot_cells(offset: usize, scale: u32, cells: usize) -> Vec<usize> {
    let mut v: Vec<usize> = hot_range()
        .filter_map(|pc| match svr4(pc, offset, scale, cells * 2) {
            Tick::Cell(i) => Some(i),
            _ => None,
        })
        .collect();
    v.dedup();
    v
}

fn sum(cells: &[u16]) -> u64 {
    cells.iter().map(|&c| u64::from(c)).sum()
}

fn offset() -> usize {
    hot_range().start & !0xffff
}

#[test]
fn scope_counts_the_hot_function_and_stops() {
    let _t = turn();
    let mut buf = vec![0u16; 1 << 16];
    let off = offset();
    let counting = Profil::scope(&mut buf, off, 0xFFFF, |p| {
        burn(400.0);
        p.is_counting()
    })
    .unwrap();
    assert!(counting);
    assert_eq!(current().0, Config::OFF, "scope must stop profiling");
    let total = sum(&buf);
    let hot: u64 = hot_cells(off, 0xFFFF, buf.len())
        .iter()
        .map(|&i| u64::from(buf[i]))
        .sum();
    eprintln!("scope: {total} counts, {hot} in rust_hot");
    assert!(total >= 20, "{total}");
    // rust_hot burns all of the closure's CPU time.
    profdev_testkit::assert_share_at_least("rust_hot", hot as f64 / total as f64, total, 0.95);
}

#[test]
fn scope_stops_when_the_closure_panics() {
    let _t = turn();
    let mut buf = vec![0u16; 1 << 10];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Profil::scope(&mut buf, offset(), 0xFFFF, |_| panic!("boom")).unwrap()
    }));
    assert!(r.is_err());
    assert_eq!(current().0, Config::OFF);
}

#[test]
fn owned_buffer_comes_back_from_into_buffer() {
    let _t = turn();
    let p = Profil::start(vec![0u16; 1 << 16].into_boxed_slice(), offset(), 0xFFFF).unwrap();
    burn(200.0);
    let live = sum(&p.snapshot());
    let buf = p.into_buffer();
    assert_eq!(current().0, Config::OFF);
    assert!(
        sum(&buf) >= live && live >= 5,
        "live {live}, final {}",
        sum(&buf)
    );
}

#[test]
fn a_later_start_replaces_and_dropping_the_old_handle_leaves_it_running() {
    let _t = turn();
    let a = Profil::start(vec![0u16; 1 << 16].into_boxed_slice(), offset(), 0xFFFF).unwrap();
    burn(100.0);
    let b = Profil::start(vec![0u16; 1 << 16].into_boxed_slice(), offset(), 0xFFFF).unwrap();
    assert!(!a.is_counting() && b.is_counting());
    let a_at_switch = sum(&a.snapshot());
    drop(a);
    assert!(
        b.is_counting(),
        "dropping the replaced handle stopped the new one"
    );
    burn(150.0);
    assert!(sum(&b.snapshot()) >= 5);
    drop(b);
    assert_eq!(current().0, Config::OFF);
    assert!(a_at_switch >= 3);
}

#[test]
fn scale_0_and_1_and_bufsiz_0_do_not_count() {
    let _t = turn();
    for (len, scale) in [(1 << 16, 0u32), (1 << 16, 1), (0, 0xFFFF)] {
        let p = Profil::start(vec![0u16; len].into_boxed_slice(), offset(), scale).unwrap();
        assert!(!p.is_counting());
        burn(60.0);
        assert_eq!(sum(&p.into_buffer()), 0, "len {len} scale {scale:#x}");
    }
}

#[test]
fn monitor_writes_mon_out_into_profdir() {
    let _t = turn();
    let dir = common::tempdir();
    std::env::set_var("PROFDIR", dir.path());
    let r = hot_range();
    let text = (r.start & !0xffff)..(r.end + 0xffff) & !0xffff;
    let words = 12 + 8 * 10 + (text.end - text.start) / 2;
    let m = Monitor::start(text.clone(), vec![0u16; words].into_boxed_slice(), 10)
        .unwrap()
        .unwrap();
    burn(300.0);
    let path = m.finish().unwrap();
    std::env::remove_var("PROFDIR");
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("{}.", std::process::id())),
        "{name}"
    );
    let mo = MonOut::parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!((mo.lpc, mo.hpc), (text.start as u64, text.end as u64));
    assert_eq!(mo.counts.len(), 10);
    assert_eq!(mo.hist.len(), (text.end - text.start) / 2);
    // A histogram as large as the text: scale 0xffff.
    let hot: u64 = hot_cells(text.start, 0xffff, mo.hist.len())
        .iter()
        .map(|&i| u64::from(mo.hist[i]))
        .sum();
    assert!(hot >= 15, "{hot} counts in rust_hot");
}

#[test]
fn monitor_refuses_what_svr4_ignored() {
    let _t = turn();
    let e = Monitor::start(0x1000..0x2000, vec![0u16; 12].into_boxed_slice(), 0)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            Error::MonitorBufferTooSmall {
                bufsize: 12,
                nfunc: 0
            }
        ),
        "{e}"
    );
    let e = Monitor::start(
        std::ops::Range {
            start: 0x2000,
            end: 0x1000,
        },
        vec![0u16; 100].into_boxed_slice(),
        0,
    )
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "monitor: lowpc 0x2000 is not below highpc 0x1000"
    );
    std::env::set_var("PROFDIR", "");
    let m = Monitor::start(0x1000..0x2000, vec![0u16; 100].into_boxed_slice(), 0).unwrap();
    std::env::remove_var("PROFDIR");
    assert!(m.is_none(), "an empty PROFDIR means no profiling");
}

#[test]
fn gmon_start_and_mcleanup_write_a_gnu_gmon_out() {
    let _t = turn();
    let dir = common::tempdir();
    let prefix = dir.path().join("g");
    std::env::set_var("GMON_OUT_PREFIX", &prefix);
    gmon::start().unwrap();
    assert!(matches!(gmon::start(), Err(Error::AlreadyStarted)));
    burn(100.0);
    gmon::moncontrol(false).unwrap();
    assert_eq!(current().0, Config::OFF);
    gmon::moncontrol(true).unwrap();
    burn(100.0);
    let path = gmon::mcleanup().unwrap();
    std::env::remove_var("GMON_OUT_PREFIX");
    assert_eq!(path, dir.path().join(format!("g.{}", std::process::id())));
    assert!(matches!(gmon::mcleanup(), Err(Error::NotStarted)));
    let b = std::fs::read(&path).unwrap();
    assert_eq!(&b[..8], b"gmon\x01\x00\x00\x00");
    let t = profdev_profil::text::main_program().unwrap();
    let low = u64::from_le_bytes(b[21..29].try_into().unwrap());
    let high = u64::from_le_bytes(b[29..37].try_into().unwrap());
    let nbins = u32::from_le_bytes(b[37..41].try_into().unwrap()) as u64;
    assert_eq!(low, ((t.low & !3) - t.bias) as u64);
    assert_eq!(high, (((t.high + 3) & !3) - t.bias) as u64);
    assert_eq!((high - low) / 4, nbins);
    assert_eq!(b.len() as u64, 20 + 41 + 2 * nbins);
    let counts: u64 = b[61..]
        .chunks(2)
        .map(|c| u64::from(u16::from_le_bytes([c[0], c[1]])))
        .sum();
    assert!(counts >= 10, "{counts}");
}
